import Courier
import CourierAsyncHTTPClient
import CourierTestServer
import Foundation
import HTTPTypes
import Testing

/// An HTTP/2 server that misbehaves, on real sockets (the in-process test server over TLS).
///
/// | scenario | transport | expected | bound |
/// |---|---|---|---|
/// | GOAWAY with a last stream ID below an in-flight stream, GET | both | streams at or below it answered once; the GET above it retried on a new connection | the test's own time |
/// | the same, POST | AsyncHTTPClient | the same: the POST above the last stream ID is sent again and answered once | the test's own time |
/// | the same, POST | URLSession | kind `transport`, the POST never acted on (libcurl resends it itself and the server resets the resend, see RefusedStreamTests) | the test's own time |
/// | RST_STREAM REFUSED_STREAM / INTERNAL_ERROR | both | AsyncHTTPClient: retried / kind `transport`, not retried for a POST; URLSession: kind `transport`, acted on once (PipelineTests, RefusedStreamTests) | — |
/// | SETTINGS_MAX_CONCURRENT_STREAMS = 1, 100 concurrent requests | both | all 100 answered; one connection on AsyncHTTPClient, more than one on URLSession (libcurl opens connections rather than wait for the stream) | the test's own time |
/// | request-body window 0 that never opens | both | kind `timeout` at the request's 1 s timeout | 1 s + slack |
/// | 1,000 PINGs before the answer | both | the answer arrives; the next request too (on AsyncHTTPClient swift-nio-http2's limit of 200 control frames in 30 s ends the connection: a new one, never `cancelled`); shutdown within 5 s | the test's own time |
/// | `:status` of 2000, 1000, 65535 or 99 | both | kind `transport`, the stream reset with PROTOCOL_ERROR (RFC 9113 §8.1.1), the client goes on (before: 99 trapped in AsyncHTTPClient, seen in a run; 2000 reaches HTTPTypes, which traps outside 0...999; swift-nio-http2 takes 1000 for an informational head) | the test's own time |
/// | a 64 KiB and a 1 MiB response header, HTTP/1.1 | both | 64 KiB arrives whole; 1 MiB is kind `transport` on both | the test's own time |
/// | an over-limit response header, HTTP/2 | — | not tested: the test server will not send a header block over the client's SETTINGS_MAX_HEADER_LIST_SIZE | — |
///
/// A finding of this suite, fixed: RFC 9113 §6.8 says streams above a GOAWAY's last stream ID
/// were not processed, so even a POST on one may be sent again; swift-nio-http2 closes them with
/// error code CANCEL, the same as a stream the server cancelled after acting on it, and Courier
/// did not resend the POST. The transport now watches each connection's GOAWAY frames and closes
/// such a stream as refused (REFUSED_STREAM, RFC 9113 §8.7), which the retry stage resends.
///
/// These need HTTP/2, which the test server speaks over TLS with a CA made at test time;
/// URLSession on Linux (FoundationNetworking) trusts only the system's CA bundle, so its runs
/// are made where the test CA is in a private bundle (``TransportKind/overTLS``,
/// `scripts/test-urlsession-tls.sh`); a plain `swift test` runs AsyncHTTPClient's. The header
/// case is HTTP/1.1 and runs on both everywhere.
@Suite("Faults: a misbehaving HTTP/2 server")
struct HTTP2MisbehaviourTests {
    /// One run of the GOAWAY scenario: a transport, a method, and (AsyncHTTPClient) DATA frame
    /// coalescing on or off.
    struct GoAwayCase: Sendable, CustomTestStringConvertible {
        var kind: TransportKind
        var method: HTTPRequest.Method
        var coalescing: Int?
        var testDescription: String { "\(kind) \(method) coalescing \(coalescing.map(String.init) ?? "off")" }

        /// With DATA frame coalescing on (the default) a handler of ours is in each stream's
        /// pipeline on AsyncHTTPClient, off there is none; the connection's GOAWAY watcher marks
        /// unprocessed streams either way: both are run. URLSession has no such setting.
        static var all: [GoAwayCase] {
            TransportKind.overTLS.flatMap { kind in
                [HTTPRequest.Method.get, .post].flatMap { method in
                    (kind == .asyncHTTPClient ? [1 << 20, nil] : [nil]).map { GoAwayCase(kind: kind, method: method, coalescing: $0) }
                }
            }
        }
    }

    @Test(arguments: GoAwayCase.all)
    func goAwayBelowAnInFlightStreamRetriesOnlyTheUnprocessedOne(_ scenario: GoAwayCase) async throws {
        let method = scenario.method
        let counter = PathCounter()
        let answered = Locked<[String]>([])
        // Holds the three streams below the GOAWAY until it has been dealt with, however slow the machine.
        let held = Gate()
        let server = try await tlsServer { request in
            let n = counter.hit(request.path)
            if request.path == "/goaway", n == 1 {
                return ScriptedResponse(behaviour: .goAway)
            }
            if request.path.hasPrefix("/slow") {
                await held.wait()
            }
            answered.withLock { $0.append(request.path) }
            return .json(#"{"id":\#(n),"title":"\#(request.path)"}"#)
        }
        try await withClient(scenario.kind, server: server, transportConfiguration: { $0.http2ReadCoalescing = scenario.coalescing }) {
            client in
            _ = try await client.send(Endpoint<Article>(path: "/warm"))
            // Three streams in flight on the connection, then the one the server sends GOAWAY on.
            let slow = (0..<3).map { index in client.start(Endpoint<Article>(path: "/slow\(index)").deduplication(.disabled)) }
            #expect(await eventually { server.requests.count == 4 })
            let endpoint = Endpoint<Article>(method: method, path: "/goaway", body: method == .post ? .json(["a": 1]) : nil)
            if scenario.kind == .urlSession, method == .post {
                // libcurl resends the POST on a new connection by itself, and the server resets
                // that resend with PROTOCOL_ERROR before its handler runs (see RefusedStreamTests):
                // kind `transport`, and the POST is never acted on twice.
                let error = await expectCourierError { _ = try await client.send(endpoint) }
                #expect(error?.kind == .transport)
                #expect(answered.withLock { $0 }.filter { $0 == "/goaway" }.isEmpty)
                await held.open()
                for task in slow { #expect(try await task.value.id == 1) }
                return
            }
            // RFC 9113 §6.8: a stream above the GOAWAY's last stream ID was not processed, so it is
            // sent again on a new connection — a POST too (the retry policy resends any method
            // the server provably did not process).
            let refused: Response<Article>
            do {
                refused = try await client.response(endpoint)
            } catch {
                await held.open()
                throw error
            }
            #expect(refused.value.title == "/goaway")
            await held.open()
            for task in slow {
                let article = try await task.value
                #expect(article.id == 1)  // each stream below the last stream ID processed once
            }
            let attempts = server.requests.filter { $0.path == "/goaway" }
            #expect(answered.withLock { $0 }.filter { $0 == "/goaway" }.count == 1)
            #expect(attempts.count == 2)
            #expect(Set(attempts.map(\.connectionID)).count == attempts.count)
            #expect(server.requests.allSatisfy { $0.httpVersion == "HTTP/2" })
        }
    }

    @Test(arguments: TransportKind.overTLS)
    func oneConcurrentStreamAllowedStillServesAHundredRequestsOnOneConnection(_ kind: TransportKind) async throws {
        let server = try await TestServer.start(
            .tls(Certificates.shared), http2: HTTP2Options(maxConcurrentStreams: 1), handler: Routes.standard)
        // AsyncHTTPClient bounds a request's wait for a connection (here: for the one stream)
        // by its connect timeout; a hundred requests taking turns on one stream waited past the
        // 10 s default once in a loaded parallel run ("Get connection from pool timeout").
        try await withClient(kind, server: server, transportConfiguration: { $0.connectTimeout = .seconds(120) }) { client in
            _ = try await client.send(Endpoint<Article>(path: "/json"))
            let versions = try await withThrowingTaskGroup(of: HTTPVersion.self) { group in
                for _ in 0..<100 {
                    group.addTask { try await client.response(Endpoint<Article>(path: "/json").deduplication(.disabled)).version }
                }
                return try await group.reduce(into: [HTTPVersion]()) { $0.append($1) }
            }
            #expect(versions.count == 100)
            #expect(versions.allSatisfy { $0 == HTTP2Tests.reportedHTTP2(kind) })
            #expect(server.requests.count == 101)
            #expect(server.requests.allSatisfy { $0.httpVersion == "HTTP/2" })
            if kind == .asyncHTTPClient {
                #expect(server.connectionCount == 1)
            } else {
                // libcurl does not wait for the one stream: it opens more connections to the
                // origin instead (Courier's scheduler still bounds how many requests are in flight).
                #expect(server.connectionCount > 1)
            }
        }
    }

    @Test(arguments: TransportKind.overTLS)
    func aRequestBodyWindowThatNeverOpensEndsAtTheDeadline(_ kind: TransportKind) async throws {
        let server = try await TestServer.start(
            .tls(Certificates.shared), http2: HTTP2Options(initialWindowSize: 0), handler: Routes.standard)
        try await withClient(kind, server: server) { client in
            let started = ContinuousClock.now
            let error = await expectCourierError {
                _ = try await client.send(
                    Endpoint<Data>(
                        method: .post, path: "/echo", body: .data(Data(count: 100_000), contentType: "application/octet-stream"),
                        timeout: .seconds(1), decoding: .data
                    ).retry(.never))
            }
            #expect(error?.kind == .timeout)
            #expect(ContinuousClock.now - started < .seconds(30))
            #expect(server.requests.isEmpty)  // the body never arrived
        }
    }

    @Test(arguments: TransportKind.overTLS)
    func aFloodOfPingsDoesNotStopTheAnswer(_ kind: TransportKind) async throws {
        let server = try await tlsServer { request in
            request.path == "/flood"
                ? .json(#"{"id":5,"title":"after pings"}"#).with(.pingFlood(count: 1_000)) : .json(#"{"id":1,"title":"x"}"#)
        }
        let (transport, shutdown): (any Transport, @Sendable () async throws -> Void)
        switch kind {
        case .asyncHTTPClient:
            // A read timeout far past the shutdown bound below, so only a prompt close meets it.
            let ahc = AsyncHTTPClientTransport(
                configuration: try .init {
                    try $0.trust(pemCertificates: Certificates.shared.caPEMBytes)
                    $0.readTimeout = .seconds(300)
                })
            (transport, shutdown) = (ahc, { try await ahc.shutdown() })
        case .urlSession:
            try PrivateTrust.trust(Certificates.shared)
            let session = URLSessionTransport()
            (transport, shutdown) = (session, { session.shutdown() })
        }
        let client = Client(configuration: .init(transport: transport, baseURL: server.baseURL))
        let response = try await client.response(Endpoint<Article>(path: "/flood"))
        #expect(response.value.id == 5)
        #expect(response.version == HTTP2Tests.reportedHTTP2(kind))
        #expect(server.requests.first?.httpVersion == "HTTP/2")
        // swift-nio-http2 allows 200 control frames in 30 s, so on AsyncHTTPClient the flood ends
        // the connection from the client's side. The next request is answered all the same — on
        // a new connection if the pool had the old one closed under it, never failing as
        // `cancelled` (nobody cancelled it).
        let next = try await client.send(Endpoint<Article>(path: "/json"))
        #expect(next.id == 1)
        // The connection the flood ended is closed at once on shutdown, not left for the
        // read-idle timeout (300 s here); the bound leaves room for a loaded machine.
        let started = ContinuousClock.now
        try await shutdown()
        #expect(ContinuousClock.now - started < .seconds(60), "shutdown took \(ContinuousClock.now - started)")
        #expect(await eventually { server.openConnectionCount == 0 })
        try await server.stop()
    }

    @Test
    func aLargeResponseHeadOverHTTP2IsTakenAsOverHTTP1() async throws {
        // A 64 KiB header (a big cookie or policy) is within both transports' HTTP/1.1 limits;
        // over HTTP/2 AsyncHTTPClient's connection took 16 KiB of head (swift-nio-http2's
        // default), so the server could not send it, and a larger one ended the connection. The
        // client now advertises 80 KiB (RFC 9113 §6.5.2). AsyncHTTPClient only: URLSession on
        // Linux (FoundationNetworking's libcurl) takes no HTTP/2 head of 32 KiB or more from
        // this server (seen: the connection closes before the response); its limit is the
        // platform's, not Courier's.
        let server = try await tlsServer { request in
            ScriptedResponse(
                status: 200, headers: [("Content-Type", "application/json"), ("X-Big", String(repeating: "h", count: 64 << 10))],
                body: Data(#"{"id":1,"title":"x"}"#.utf8))
        }
        try await withClient(.asyncHTTPClient, server: server) { client in
            for _ in 0..<2 {
                let big = try await client.response(Endpoint<Article>(path: "/big").retry(.never).deduplication(.disabled))
                #expect(big.value.id == 1)
                #expect(big.headers[HTTPField.Name("X-Big")!]?.utf8.count == 64 << 10)
            }
            #expect(server.requests.allSatisfy { $0.httpVersion == "HTTP/2" })
            #expect(server.requests.count == 2)
        }
    }

    // HTTP/1.1 only. Over HTTP/2 an over-limit header list cannot be produced here: the test
    // server (swift-nio-http2) refuses to send a header block larger than the client's
    // SETTINGS_MAX_HEADER_LIST_SIZE (80 KiB), so the answer never leaves it and only the fixture
    // would be tested. The client's refusal of a larger HTTP/2 head is therefore untested.
    @Test(arguments: TransportKind.allCases)
    func aResponseHeaderLargerThanTheLimitFailsTyped(_ kind: TransportKind) async throws {
        let server = try await http1Server { request in
            // /big: 64 KiB, within both transports' limits; /huge: 1 MiB, past both (AsyncHTTPClient's
            // parser stops at 80 KiB of head, libcurl at 100 KiB per header).
            let size = request.path == "/huge" ? 1 << 20 : 64 << 10
            return ScriptedResponse(
                status: 200, headers: [("Content-Type", "application/json"), ("X-Huge", String(repeating: "h", count: size))],
                body: Data(#"{"id":1,"title":"x"}"#.utf8))
        }
        try await withClient(kind, server: server) { client in
            let big = try await client.response(Endpoint<Article>(path: "/big").retry(.never))
            #expect(big.value.id == 1)
            #expect(big.headers[HTTPField.Name("X-Huge")!]?.utf8.count == 64 << 10)
            let error = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/huge").retry(.never)) }
            #expect(error?.kind == .transport)
        }
    }

    @Test(arguments: TransportKind.overTLS, [2000, 1000, 99, 65535])
    func aStatusThatIsNotThreeDigitsIsATransportErrorNotACrash(_ kind: TransportKind, _ status: Int) async throws {
        // RFC 9110 §15: a status code is three digits. Over HTTP/2 `:status` is text that
        // swift-nio-http2 does not check for it, and HTTPResponse.Status traps outside 0...999:
        // `2000` once crashed the process.
        let server = try await tlsServer { request in
            request.path == "/odd" ? ScriptedResponse(status: status, body: Data("x".utf8)) : .json(#"{"id":1,"title":"x"}"#)
        }
        try await withClient(kind, server: server) { client in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Data>(path: "/odd", decoding: .data).retry(.never)) }
            #expect(error?.kind == .transport)
            // The client goes on.
            let response = try await client.response(Endpoint<Article>(path: "/json"))
            #expect(response.value.id == 1)
            #expect(response.version == HTTP2Tests.reportedHTTP2(kind))
            #expect(server.requests.allSatisfy { $0.httpVersion == "HTTP/2" })
        }
    }
    /// The same `:status` on a HEADERS frame that ends the stream (no body): the stream closes
    /// cleanly in the HTTP/2 library, and the request failed as if its connection had closed
    /// under it — sent again as on a stale connection, then reported as a connection that could
    /// not be made. It is a malformed response (RFC 9113 §8.1.1): kind `transport`, sent once.
    /// AsyncHTTPClient only: the stream's clean close is swift-nio-http2's (libcurl, under
    /// URLSession, has its own HTTP/2 stack; the test above covers both transports' refusal).
    /// An interim status (100, 103) on a frame that ends the stream is malformed too (RFC 9113
    /// §8.1: an informational head never ends a stream): swift-nio-http2 leaves the stream open
    /// and AsyncHTTPClient waits for a final head that cannot come, until the deadline.
    @Test(arguments: [2000, 99, 101, 100, 103])
    func aStatusThatIsNotThreeDigitsEndingTheStreamIsSentOnce(_ status: Int) async throws {
        let server = try await tlsServer { request in
            request.path == "/odd" ? ScriptedResponse(behaviour: .headOnlyEndingStream(status: status)) : .json(#"{"id":1,"title":"x"}"#)
        }
        try await withClient(.asyncHTTPClient, server: server, configure: { $0.retry = .never }) { client in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Data>(path: "/odd", decoding: .data)) }
            #expect(error?.kind == .transport, "\(String(describing: error))")
            #expect(error?.couldNotConnect == false)
            #expect(server.requests.filter { $0.path == "/odd" }.count == 1)
            let response = try await client.response(Endpoint<Article>(path: "/json"))
            #expect(response.value.id == 1)
        }
    }

    @Test(arguments: TransportKind.overTLS, [["+2"], ["2", "2"], ["2, 2"]])
    func aContentLengthThatIsNoCountIsATransportErrorAlike(_ kind: TransportKind, _ lengths: [String]) async throws {
        // RFC 9110 §8.6: Content-Length is 1*DIGIT, and one field (RFC 9112 §6.3 ¶5: else the
        // message is malformed). swift-nio-http2 takes `+2` and a repeated field, so over HTTP/2
        // AsyncHTTPClient answered where URLSession refused.
        let server = try await tlsServer { request in
            request.path == "/odd"
                ? ScriptedResponse(status: 200, headers: lengths.map { ("Content-Length", $0) }, body: Data("ok".utf8))
                : .json(#"{"id":1,"title":"x"}"#)
        }
        try await withClient(kind, server: server) { client in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Data>(path: "/odd", decoding: .data).retry(.never)) }
            #expect(error?.kind == .transport, "\(String(describing: error))")
            // The client goes on.
            let response = try await client.response(Endpoint<Article>(path: "/json"))
            #expect(response.value.id == 1)
            #expect(server.requests.allSatisfy { $0.httpVersion == "HTTP/2" })
        }
    }

    /// RFC 9113 §8.6: HTTP/2 has no 101 (Switching Protocols), so a stream answered with one is
    /// malformed (§8.1.1). AsyncHTTPClient takes a 101 for the final head, and the real head
    /// that follows on the stream once stopped the process; other interim heads (100, 103) are
    /// passed over as they should be (RFC 9110 §15.2). FoundationNetworking hands each interim
    /// head to the delegate before the final one; URLSessionTransport once took it for the answer.
    @Test(arguments: TransportKind.overTLS, [101, 100, 103])
    func aSwitchingProtocolsHeadOverHTTP2IsATransportErrorNotACrash(_ kind: TransportKind, _ status: Int) async throws {
        let server = try await tlsServer { request in
            request.path == "/interim"
                ? ScriptedResponse.json(#"{"id":2,"title":"after"}"#).with(.interimHead(status: status)) : .json(#"{"id":1,"title":"x"}"#)
        }
        try await withClient(kind, server: server) { client in
            if status == 101 {
                let error = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/interim").retry(.never)) }
                #expect(error?.kind == .transport)
            } else {
                let article = try await client.send(Endpoint<Article>(path: "/interim").retry(.never))
                #expect(article.id == 2)
            }
            // The client goes on.
            let response = try await client.response(Endpoint<Article>(path: "/json"))
            #expect(response.value.id == 1)
            #expect(response.version == HTTP2Tests.reportedHTTP2(kind))
        }
    }
}
