import Courier
import CourierAsyncHTTPClient
import CourierTestServer
import Foundation
import HTTPTypes
import Testing

/// The AsyncHTTPClient transport's own single retry: a request sent on a pooled keep-alive
/// connection that the server closes before any byte of an answer is sent once more, on a fresh
/// connection, when its method is idempotent (RFC 9110 §9.2.2); never otherwise.
///
/// Staged without a race: the server answers the first request on each connection and closes a
/// connection, unanswered, on its second. The transport is called directly, so the client's retry
/// stage is not involved. AsyncHTTPClient only: URLSessionTransport leaves connection reuse and its
/// retries to the platform (libcurl on Linux), which Courier does not control.
@Suite("AsyncHTTPClient transport: a pooled connection closed under a request")
struct StaleConnectionTests {
    /// A server that closes each connection, unanswered, at its second request, and answers any
    /// other with its method and connection; `answer` answers any other request instead.
    static func server(
        answer: @escaping @Sendable (RecordedRequest) -> ScriptedResponse = {
            .text("\($0.method) answered on connection \($0.connectionID)")
        }
    ) async throws -> TestServer {
        let seen = Locked([Int: Int]())
        return try await http1Server { request in
            let count = seen.withLock { counts -> Int in
                counts[request.connectionID, default: 0] += 1
                return counts[request.connectionID]!
            }
            if count == 2 { return ScriptedResponse.text("never sent").with(.closeBeforeResponding) }
            return answer(request)
        }
    }

    static func request(_ method: HTTPRequest.Method, _ server: TestServer, body: RequestBody? = nil) -> Request {
        Request(
            head: HTTPRequest(method: method, scheme: "http", authority: "127.0.0.1:\(server.port)", path: "/item"), body: body,
            timeout: .seconds(30))
    }

    static func text(_ response: RawResponse) async throws -> String {
        String(decoding: try await response.body.collect(upTo: 1 << 20), as: UTF8.self)
    }

    @Test(arguments: [HTTPRequest.Method.get, .put, .delete])
    func anIdempotentRequestIsSentOnceMoreOnAFreshConnection(_ method: HTTPRequest.Method) async throws {
        let server = try await Self.server()
        let transport = AsyncHTTPClientTransport()
        try await shuttingDown(transport, server) {
            let first = try await transport.send(Self.request(.get, server))
            #expect(try await Self.text(first).hasPrefix("GET answered"))
            // Sent on the kept-alive connection, which the server closes unanswered: sent again.
            let body = method == .get ? nil : RequestBody.data(Data("payload".utf8))
            let second = try await transport.send(Self.request(method, server, body: body))
            #expect(second.status.code == 200)
            let answer = try await Self.text(second)
            #expect(answer.hasPrefix("\(method) answered"))
            let requests = server.requests
            #expect(requests.count == 3)
            #expect(server.connectionCount == 2)
            if requests.count == 3 {
                #expect(requests[1].connectionID == requests[0].connectionID)
                #expect(requests[2].connectionID != requests[0].connectionID)
                #expect(answer == "\(method) answered on connection \(requests[2].connectionID)")
                // The body went both times, whole.
                if method != .get {
                    #expect(requests[1].body == Data("payload".utf8))
                    #expect(requests[2].body == Data("payload".utf8))
                }
            }
        }
    }

    /// A POST is not sent again by the transport, with or without an `Idempotency-Key`. The
    /// transport repeats by method only; a key makes a POST retryable for the client's retry
    /// stage (and the outbox), which count the attempt, log it and charge the retry budget — a
    /// silent second send here would hide it from them.
    @Test(arguments: [nil, "order-17"])
    func aPostIsNotSentAgain(idempotencyKey: String?) async throws {
        let server = try await Self.server()
        let transport = AsyncHTTPClientTransport()
        try await shuttingDown(transport, server) {
            _ = try await Self.text(try await transport.send(Self.request(.get, server)))
            var request = Self.request(.post, server, body: .data(Data("order".utf8)))
            if let idempotencyKey { request.head.headerFields[HTTPField.Name("Idempotency-Key")!] = idempotencyKey }
            let error = await expectCourierError { _ = try await transport.send(request) }
            #expect(error?.kind == .transport)
            // The server saw the POST once: the transport never repeats it.
            #expect(server.requests.map(\.method) == ["GET", "POST"])
            // The pool recovers: the next request gets a fresh connection and its answer.
            let after = try await Self.text(try await transport.send(Self.request(.get, server)))
            #expect(after.hasPrefix("GET answered"))
        }
    }
}
