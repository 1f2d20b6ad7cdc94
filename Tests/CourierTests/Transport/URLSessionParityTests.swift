import Courier
import CourierTestServer
import Foundation
import HTTPTypes
import Testing

/// Behaviours where `URLSessionTransport` used to differ from the AsyncHTTPClient transport,
/// run on both: the platform must neither wait for a credential nobody gives, nor keep cookies
/// or cached responses behind the pipeline's back, nor round a deadline to whole seconds.
@Suite("URLSession and AsyncHTTPClient transports behave alike")
struct URLSessionParityTests {
    @Test(arguments: TransportKind.allCases)
    func whatGoesOnTheWireIsWhatThePipelineSetsExceptWhatLinuxAdds(_ kind: TransportKind) async throws {
        // AsyncHTTPClient sends the pipeline's fields and the ones HTTP itself needs. On Linux,
        // FoundationNetworking and libcurl add four of their own to a request that does not set
        // them, and an empty value is sent as an empty field rather than none (README, platforms
        // and transports: "fields the platform adds").
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            let plain = try await client.send(Endpoint<Echo>(path: "/echo"))
            switch kind {
            case .asyncHTTPClient:
                #expect(Set(plain.headers.keys) == ["host", "accept-encoding"])
            case .urlSession:
                #if canImport(Darwin)
                #expect(plain.headers["accept-encoding"] != nil)
                #else
                #expect(Set(plain.headers.keys) == ["host", "accept-encoding", "accept-language", "user-agent", "accept", "connection"])
                #endif
            }
            // Fields the request does set are sent as set.
            let set = try await client.send(
                Endpoint<Echo>(path: "/echo", headers: [.acceptLanguage: "fr", .userAgent: "MyApp/2", .accept: "application/json"]))
            #expect(set.headers["accept-language"] == "fr")
            #expect(set.headers["user-agent"] == "MyApp/2")
            #expect(set.headers["accept"] == "application/json")
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aTransportShutDownReleasesItsConnectionsAndRefusesNewRequests(_ kind: TransportKind) async throws {
        // Shutting down closes the idle keep-alive connection (no descriptor of this process
        // still holds a socket to the server; on Linux FoundationNetworking closes it only once
        // the session is freed, which shutdown lets happen), a second shutdown is harmless, and a request
        // afterwards is a typed `transport` error — never a crash (a task made in an invalidated
        // URLSession is one on Apple platforms).
        let server = try await http1Server()
        let (transport, shutdown) = makeTransport(kind)
        let client = Client(configuration: .init(transport: transport, baseURL: server.baseURL))
        // Sockets another test left open to an earlier server on this reused loopback port.
        let stale = HeldSockets.to("127.0.0.1", port: server.port).count
        _ = try await client.send(Endpoint<Echo>(path: "/echo"))
        if HeldSockets.isReadable {
            // The measurement sees the connection in use, so its later drop means something.
            #expect(await eventually(seconds: 30) { HeldSockets.to("127.0.0.1", port: server.port).count > stale })
        }
        try await shutdown()
        try await shutdown()
        if HeldSockets.isReadable {
            #expect(await eventually(seconds: 30) { HeldSockets.to("127.0.0.1", port: server.port).count <= stale })
        }
        let error = await expectCourierError { _ = try await client.send(Endpoint<Echo>(path: "/echo")) }
        #expect(error?.kind == .transport)
        #expect(error?.message == "the transport is shut down")
        #expect(error?.context?.attempt == 1)
        #expect(await eventually(seconds: 30) { server.openConnectionCount == 0 })
        try await server.stop()
    }

    @Test(arguments: TransportKind.allCases)
    func aRequestInFlightWhenTheTransportShutsDownFailsAlike(_ kind: TransportKind) async throws {
        // The caller did not cancel it: the transport went away under it. Both transports give
        // the same kind for it, and the caller's task is left as it was.
        let gate = Gate()
        let server = try await http1Server { request in
            if request.path == "/held" { await gate.wait() }
            return .text("late")
        }
        let (transport, shutdown) = makeTransport(kind)
        let client = Client(configuration: .init(transport: transport, baseURL: server.baseURL))
        let held = Task { await expectCourierError { _ = try await client.send(Endpoint<String>(path: "/held", decoding: .string)) } }
        // Shut down once the request has reached the server.
        #expect(await eventually { server.requests.contains { $0.uri == "/held" } })
        try await shutdown()
        let error = await held.value
        #expect(error?.kind == .transport, "\(String(describing: error))")
        #expect(error?.message.contains("shut down") == true, "\(String(describing: error))")
        // An idempotent GET, and still not sent again: no transport is there to send it.
        #expect(error?.context?.attempt == 1)
        await gate.open()
        try await server.stop()
    }

    @Test(arguments: TransportKind.allCases)
    func aBodyBeingReadWhenTheTransportShutsDownFailsAlike(_ kind: TransportKind) async throws {
        // A streamed body outlives its head: when the transport shuts down under its reader, the
        // reader gets what a request in flight gets, on both transports (AsyncHTTPClient's said
        // the connection had closed under the exchange, which reads as the server's doing).
        let server = try await http1Server()
        let (transport, shutdown) = makeTransport(kind)
        let client = Client(configuration: .init(transport: transport, baseURL: server.baseURL))
        let response = try await client.stream(Endpoint<Data>(path: "/slow-body", decoding: .data))
        let received = Locked(0)
        let body = response.body
        let reader = Task {
            await expectCourierError { for try await chunk in body { received.withLock { $0 += chunk.count } } }
        }
        // The reader waits on the stalled body.
        #expect(await eventually { received.current == 5 })
        try await shutdown()
        let error = await reader.value
        #expect(error?.kind == .transport, "\(String(describing: error))")
        #expect(error?.message == "the transport is shut down", "\(String(describing: error))")
        #expect(error?.couldNotConnect == false)
        withExtendedLifetime(response) {}
        try await server.stop()
    }

    @Test(arguments: TransportKind.allCases, ["Basic realm=\"api\"", "Digest realm=\"api\", qop=\"auth\", nonce=\"abc\", opaque=\"xyz\""])
    func aChallengeWithoutACredentialComesBackAsThe401(_ kind: TransportKind, _ challenge: String) async throws {
        // Without an answer to the platform's authentication challenge the task waited forever.
        // The deadline is generous: this runs beside the 10,000-request suite, which keeps both
        // cores busy; a task that waits forever still ends in a timeout, and fails.
        let server = try await http1Server { _ in .text("who are you?", status: 401, headers: [("WWW-Authenticate", challenge)]) }
        try await withClient(kind, server: server) { client in
            let lenient = Endpoint<String>(path: "/basic-auth/u/p", acceptedStatuses: 200..<500, timeout: .seconds(60), decoding: .string)
            let response = try await client.response(lenient)
            #expect(response.status.code == 401)
            #expect(response.headers[.wwwAuthenticate] == challenge)
            #expect(response.value == "who are you?")
            let strict = Endpoint<String>(path: "/basic-auth/u/p", timeout: .seconds(60), decoding: .string)
            let error = await expectCourierError { _ = try await client.send(strict) }
            #expect(error?.kind == .httpStatus)
            #expect(error?.status?.code == 401)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func thePlatformKeepsNoCookiesAndAnswersNothingFromItsOwnCache(_ kind: TransportKind) async throws {
        // Courier's cache and (later) cookie jar decide; the session's storages are off.
        let server = try await http1Server { request in
            .text("hello", headers: [("Set-Cookie", "session=secret; Path=/"), ("Cache-Control", "max-age=600"), ("ETag", "\"e\"")])
        }
        try await withClient(kind, server: server) { client in
            _ = try await client.send(Endpoint<String>(path: "/set", decoding: .string))
            _ = try await client.send(Endpoint<String>(path: "/set", decoding: .string))
            #expect(server.requests.count == 2)
            #expect(server.requests.allSatisfy { $0.header("Cookie") == nil })
            #expect(server.requests.allSatisfy { $0.header("If-None-Match") == nil })
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aSubSecondDeadlineNeverFiresBeforeItsTime(_ kind: TransportKind) async throws {
        // A 900 ms timeout once fired after about 3 ms on Linux (the platform rounded it to whole
        // seconds); the pipeline's clock decides. The property is a lower bound, so it holds on a
        // loaded machine too: an answer in time is a value, and a timeout comes no earlier.
        let server = try await http1Server { request in
            request.path == "/quick" ? ScriptedResponse.text("in time") : ScriptedResponse.text("late").with(.stall(.seconds(600)))
        }
        try await withClient(kind, server: server) { client in
            let clock = ContinuousClock()
            let start = clock.now
            do {
                let quick = try await client.send(
                    Endpoint<String>(path: "/quick", timeout: .milliseconds(900), decoding: .string).retry(.never))
                #expect(quick == "in time")
            } catch let error as CourierError where error.kind == .timeout {
                #expect(clock.now - start >= .milliseconds(900), "timed out early, after \(clock.now - start)")
            }
            let lateStart = clock.now
            let error = await expectCourierError {
                _ = try await client.send(Endpoint<String>(path: "/late", timeout: .milliseconds(900), decoding: .string).retry(.never))
            }
            #expect(error?.kind == .timeout)
            #expect(clock.now - lateStart >= .milliseconds(900))
        }
    }

    @Test(arguments: TransportKind.allCases)
    func theVersionIsTheOneSpokenNeverAGuess(_ kind: TransportKind) async throws {
        // Cleartext is HTTP/1.1 on both; over TLS URLSession says .unknown rather than a wrong
        // value (it may negotiate HTTP/2 without telling), AsyncHTTPClient says what ALPN chose.
        let server = try await http1Server { _ in .text("v") }
        try await withClient(kind, server: server) { client in
            let response = try await client.response(Endpoint<String>(path: "/v", decoding: .string))
            #expect(response.version == .http1_1)
        }
        #expect(HTTPVersion.unknown.description == "HTTP/?")
        if kind == .asyncHTTPClient {
            let tls = try await tlsServer { _ in .text("v") }
            try await withClient(kind, server: tls) { client in
                let response = try await client.response(Endpoint<String>(path: "/v", decoding: .string))
                #expect(response.version == .http2)
            }
        }
    }

    @Test(arguments: TransportKind.allCases)
    func cancellingARequestMidBodyStopsTheTransfer(_ kind: TransportKind) async throws {
        // The server sends 1,000 chunks 100 ms apart (100 s); a cancelled request must close its
        // connection at once, which the server sees as an abandoned exchange long before its end
        // (however slow the machine: the wait below ends well before the body would).
        let server = try await http1Server { _ in
            ScriptedResponse(status: 200, headers: [("Content-Type", "application/octet-stream")], body: Data(count: 1000 * 1024))
                .with(.chunked(chunkSize: 1024, delay: .milliseconds(100)))
        }
        try await withClient(kind, server: server) { client in
            let handle = client.start(Endpoint<Data>(path: "/slow-body", decoding: .data).retry(.never))
            #expect(await eventually { server.requests.count == 1 })
            handle.cancel()
            let error = await expectCourierError { _ = try await handle.value }
            #expect(error?.kind == .cancelled)
            #expect(await eventually { server.abandonedCount == 1 })
        }
    }
}

/// A GET with a body: RFC 9110 §9.3.1 gives it no meaning, yet an app may send one.
@Suite("A GET with a body")
struct GETWithABodyTests {
    /// AsyncHTTPClient sends it. URLSession refuses it (FoundationNetworking with
    /// `NSURLErrorDataLengthExceedsMaximum`, before anything is sent): that was kind `transport`,
    /// which the retry stage took for a connection failure and sent again, each time refused
    /// the same way. It is kind `invalidRequest` now, sent nowhere and never retried.
    @Test(arguments: TransportKind.allCases)
    func isSentByAsyncHTTPClientAndRefusedOnceByURLSession(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server, configure: { $0.retry = RetryPolicy(maxAttempts: 3) }) { client in
            let endpoint = Endpoint<Echo>(path: "/echo", body: .json(["q": 1]))
            switch kind {
            case .asyncHTTPClient:
                let echo = try await client.send(endpoint)
                #expect(echo.method == "GET")
                #expect(echo.body == #"{"q":1}"#)
                #expect(server.requests.count == 1)
            case .urlSession:
                let error = await expectCourierError { _ = try await client.send(endpoint) }
                #expect(error?.kind == .invalidRequest, "\(String(describing: error))")
                #expect(server.requests.isEmpty)
            }
        }
    }

    /// An empty body is no body: the refusal above is for a GET whose body holds bytes. Both
    /// transports send a GET with an empty one (a guard: a refusal here would read as a failed
    /// connection and be retried).
    @Test(arguments: TransportKind.allCases)
    func anEmptyBodyOnAGETIsSentAsAGET(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server, configure: { $0.retry = RetryPolicy(maxAttempts: 3) }) { client in
            let echo = try await client.send(Endpoint<Echo>(path: "/echo", body: .data(Data(), contentType: "application/json")))
            #expect(echo.method == "GET")
            #expect(echo.body == "")
            #expect(server.requests.count == 1)
        }
    }
}
