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
/// | GOAWAY with a last stream ID below an in-flight stream, GET | AsyncHTTPClient | streams at or below it answered once; the GET above it retried on a new connection | the test's own time |
/// | the same, POST | AsyncHTTPClient | the same: the POST above the last stream ID is sent again and answered once | the test's own time |
/// | RST_STREAM REFUSED_STREAM / INTERNAL_ERROR | AsyncHTTPClient | retried / kind `transport`, not retried for a POST (PipelineTests, RefusedStreamTests) | — |
/// | SETTINGS_MAX_CONCURRENT_STREAMS = 1, 100 concurrent requests | AsyncHTTPClient | all 100 answered, one connection | the test's own time |
/// | request-body window 0 that never opens | AsyncHTTPClient | kind `timeout` at the request's 1 s timeout | 1 s + slack |
/// | 1,000 PINGs before the answer | AsyncHTTPClient | the answer arrives; the next request too (swift-nio-http2's limit of 200 control frames in 30 s ends the connection: a new one, never `cancelled`); shutdown within 5 s | the test's own time |
/// | `:status` of 2000, 1000, 65535 or 99 | AsyncHTTPClient | kind `transport`, the stream reset with PROTOCOL_ERROR (RFC 9113 §8.1.1), the client goes on (before: 99 trapped in AsyncHTTPClient, seen in a run; 2000 reaches HTTPTypes, which traps outside 0...999; swift-nio-http2 takes 1000 for an informational head) | the test's own time |
/// | a 64 KiB and a 1 MiB response header, HTTP/1.1 | both | 64 KiB arrives whole; 1 MiB is kind `transport` on both | the test's own time |
/// | an over-limit response header, HTTP/2 | — | not tested: the test server will not send a header block over the client's SETTINGS_MAX_HEADER_LIST_SIZE | — |
///
/// A finding of this suite, fixed: RFC 9113 §6.8 says streams above a GOAWAY's last stream ID
/// were not processed, so even a POST on one may be sent again; swift-nio-http2 closes them with
/// error code CANCEL, the same as a stream the server cancelled after acting on it, and Courier
/// did not resend the POST. The transport now watches each connection's GOAWAY frames and closes
/// such a stream as refused (REFUSED_STREAM, RFC 9113 §8.7), which the retry stage resends.
///
/// AsyncHTTPClient only, except the header case: these need HTTP/2, which the test server
/// speaks over TLS with a CA made at test time; URLSession on Linux (FoundationNetworking)
/// cannot be given a trust root, so it cannot reach the server over HTTP/2 here.
@Suite("Faults: a misbehaving HTTP/2 server")
struct HTTP2MisbehaviourTests {
    // AsyncHTTPClient only: HTTP/2 needs the TLS test server, and URLSession on Linux cannot trust the test CA.
    // With DATA frame coalescing on (the default) a handler of ours is in each stream's pipeline,
    // off there is none; the connection's GOAWAY watcher marks unprocessed streams either way:
    // both are run.
    @Test(arguments: [HTTPRequest.Method.get, .post], [1 << 20, nil] as [Int?])
    func goAwayBelowAnInFlightStreamRetriesOnlyTheUnprocessedOne(_ method: HTTPRequest.Method, coalescing: Int?) async throws {
        let counter = PathCounter()
        let answered = Locked<[String]>([])
        let server = try await tlsServer { request in
            let n = counter.hit(request.path)
            if request.path == "/goaway", n == 1 {
                return ScriptedResponse(behaviour: .goAway)
            }
            if request.path.hasPrefix("/slow") {
                try? await Task.sleep(for: .milliseconds(400))
            }
            answered.withLock { $0.append(request.path) }
            return .json(#"{"id":\#(n),"title":"\#(request.path)"}"#)
        }
        try await withClient(.asyncHTTPClient, server: server, transportConfiguration: { $0.http2ReadCoalescing = coalescing }) { client in
            _ = try await client.send(Endpoint<Article>(path: "/warm"))
            // Three streams in flight on the connection, then the one the server sends GOAWAY on.
            let slow = (0..<3).map { index in client.start(Endpoint<Article>(path: "/slow\(index)").deduplication(.disabled)) }
            #expect(await eventually { server.requests.count == 4 })
            let endpoint = Endpoint<Article>(method: method, path: "/goaway", body: method == .post ? .json(["a": 1]) : nil)
            // RFC 9113 §6.8: a stream above the GOAWAY's last stream ID was not processed, so it is
            // sent again on a new connection — a POST too (the retry policy resends any method
            // the server provably did not process).
            let refused = try await client.response(endpoint)
            #expect(refused.value.title == "/goaway")
            for task in slow {
                let article = try await task.value
                #expect(article.id == 1)  // each stream below the last stream ID processed once
            }
            let attempts = server.requests.filter { $0.path == "/goaway" }
            #expect(answered.withLock { $0 }.filter { $0 == "/goaway" }.count == 1)
            #expect(attempts.count == 2)
            #expect(Set(attempts.map(\.connectionID)).count == attempts.count)
        }
    }

    // AsyncHTTPClient only: HTTP/2 needs the TLS test server, and URLSession on Linux cannot trust the test CA.
    @Test
    func oneConcurrentStreamAllowedStillServesAHundredRequestsOnOneConnection() async throws {
        let server = try await TestServer.start(
            .tls(Certificates.shared), http2: HTTP2Options(maxConcurrentStreams: 1), handler: Routes.standard)
        // AsyncHTTPClient bounds a request's wait for a connection (here: for the one stream)
        // by its connect timeout; a hundred requests taking turns on one stream waited past the
        // 10 s default once in a loaded parallel run ("Get connection from pool timeout").
        try await withClient(.asyncHTTPClient, server: server, transportConfiguration: { $0.connectTimeout = .seconds(120) }) { client in
            _ = try await client.send(Endpoint<Article>(path: "/json"))
            let versions = try await withThrowingTaskGroup(of: HTTPVersion.self) { group in
                for _ in 0..<100 {
                    group.addTask { try await client.response(Endpoint<Article>(path: "/json").deduplication(.disabled)).version }
                }
                return try await group.reduce(into: [HTTPVersion]()) { $0.append($1) }
            }
            #expect(versions.count == 100)
            #expect(versions.allSatisfy { $0 == .http2 })
            #expect(server.requests.count == 101)
            #expect(server.connectionCount == 1)
        }
    }

    // AsyncHTTPClient only: HTTP/2 needs the TLS test server, and URLSession on Linux cannot trust the test CA.
    @Test
    func aRequestBodyWindowThatNeverOpensEndsAtTheDeadline() async throws {
        let server = try await TestServer.start(
            .tls(Certificates.shared), http2: HTTP2Options(initialWindowSize: 0), handler: Routes.standard)
        try await withClient(.asyncHTTPClient, server: server) { client in
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

    // AsyncHTTPClient only: HTTP/2 needs the TLS test server, and URLSession on Linux cannot trust the test CA.
    @Test
    func aFloodOfPingsDoesNotStopTheAnswer() async throws {
        let server = try await tlsServer { request in
            request.path == "/flood"
                ? .json(#"{"id":5,"title":"after pings"}"#).with(.pingFlood(count: 1_000)) : .json(#"{"id":1,"title":"x"}"#)
        }
        let transport = AsyncHTTPClientTransport(configuration: try .init { try $0.trust(pemCertificates: Certificates.shared.caPEMBytes) })
        let client = Client(configuration: .init(transport: transport, baseURL: server.baseURL))
        let response = try await client.response(Endpoint<Article>(path: "/flood"))
        #expect(response.value.id == 5)
        #expect(response.version == .http2)
        // swift-nio-http2 allows 200 control frames in 30 s, so the flood ends the connection
        // from the client's side. The next request is answered all the same — on a new
        // connection if the pool had the old one closed under it, never failing as `cancelled`
        // (nobody cancelled it).
        let next = try await client.send(Endpoint<Article>(path: "/json"))
        #expect(next.id == 1)
        // The connection the flood ended is closed at once on shutdown, not left for the
        // read-idle timeout (30 s).
        let started = ContinuousClock.now
        try await transport.shutdown()
        #expect(ContinuousClock.now - started < .seconds(5), "shutdown took \(ContinuousClock.now - started)")
        try await server.stop()
    }

    // HTTP/1.1 only. Over HTTP/2 an over-limit header list cannot be produced here: the test
    // server (swift-nio-http2) refuses to send a header block larger than the client's
    // SETTINGS_MAX_HEADER_LIST_SIZE, so the answer never leaves it and only the fixture would be
    // tested. The client's HTTP/2 header limit is therefore untested.
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

    // AsyncHTTPClient only: HTTP/2 needs the TLS test server, and URLSession on Linux cannot trust the test CA.
    @Test(arguments: [2000, 1000, 99, 65535])
    func aStatusThatIsNotThreeDigitsIsATransportErrorNotACrash(_ status: Int) async throws {
        // RFC 9110 §15: a status code is three digits. Over HTTP/2 `:status` is text that
        // swift-nio-http2 does not check for it, and HTTPResponse.Status traps outside 0...999:
        // `2000` once crashed the process.
        let server = try await tlsServer { request in
            request.path == "/odd" ? ScriptedResponse(status: status, body: Data("x".utf8)) : .json(#"{"id":1,"title":"x"}"#)
        }
        try await withClient(.asyncHTTPClient, server: server) { client in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Data>(path: "/odd", decoding: .data).retry(.never)) }
            #expect(error?.kind == .transport)
            // The client goes on.
            let response = try await client.response(Endpoint<Article>(path: "/json"))
            #expect(response.value.id == 1)
            #expect(response.version == .http2)
        }
    }
}
