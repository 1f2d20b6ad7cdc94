import Courier
import CourierTestServer
import Foundation
import HTTPTypes
import Testing

/// A gate that holds requests until it is opened.
actor Gate {
    private var isOpen = false
    private var waiters: [CheckedContinuation<Void, Never>] = []
    private(set) var waiting = 0

    func wait() async {
        if self.isOpen { return }
        self.waiting += 1
        await withCheckedContinuation { self.waiters.append($0) }
    }

    func open() {
        self.isOpen = true
        for waiter in self.waiters { waiter.resume() }
        self.waiters.removeAll()
    }
}

struct Boom: Error {}

@Suite("Middleware can do each thing the chain promises")
struct MiddlewareTests {
    @Test(arguments: TransportKind.allCases)
    func middlewareChangesTheRequest(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        let stamp = ClosureMiddleware { request, next in
            var request = request
            request.head.headerFields[HTTPField.Name("X-Stamp")!] = "stamped"
            return try await next(request)
        }
        try await withClient(kind, server: server, configure: { $0.middleware = [stamp] }) { client in
            let received = try await client.send(Endpoint<Echo>(path: "/echo"))
            #expect(received.headers["x-stamp"] == "stamped")
        }
    }

    /// The stages read a response's status code once, when its head is set: a middleware that
    /// rewrites the status must be seen by the status check as rewritten (RFC 9110 §15: the
    /// status code is what classifies the response), both ways.
    @Test(arguments: TransportKind.allCases)
    func aStatusRewrittenByMiddlewareIsTheOneChecked(_ kind: TransportKind) async throws {
        let server = try await http1Server { request in
            request.path == "/unavailable" ? .json(#"{"id":7,"title":"late"}"#, status: 503) : .json(#"{"id":1,"title":"fine"}"#)
        }
        let rewrite = ClosureMiddleware { request, next in
            var response = try await next(request)
            response.head.status = response.head.status.code == 503 ? .ok : .serviceUnavailable
            return response
        }
        try await withClient(kind, server: server, configure: { $0.middleware = [rewrite] }) { client in
            // 200 on the wire, 503 after the middleware: fails as 503.
            let error = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/fine").retry(.never)) }
            #expect(error?.kind == .httpStatus)
            #expect(error?.status?.code == 503)
            // 503 on the wire, 200 after the middleware: decoded.
            let article = try await client.response(Endpoint<Article>(path: "/unavailable").retry(.never))
            #expect(article.status.code == 200)
            #expect(article.value.id == 7)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func throwingShortCircuitsAndNothingIsSent(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        let refuse = ClosureMiddleware { _, _ in throw CourierError(.invalidRequest, "refused by policy") }
        try await withClient(kind, server: server, configure: { $0.middleware = [refuse] }) { client in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Echo>(path: "/echo")) }
            #expect(error?.kind == .invalidRequest)
            #expect(error?.message == "refused by policy")
            #expect(server.requests.isEmpty)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func foreignErrorsAreWrappedButKept(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server, configure: { $0.middleware = [ClosureMiddleware { _, _ in throw Boom() }] }) { client in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Echo>(path: "/echo")) }
            #expect(error?.underlying is Boom)
            #expect(server.requests.isEmpty)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func middlewareAnswersWithoutCallingNext(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        let fixture = ClosureMiddleware { request, next in
            if request.head.path == "/json" {
                return RawResponse(
                    head: HTTPResponse(status: .ok, headerFields: [.contentType: "application/json"]),
                    body: .data(Data(#"{"id":42,"title":"fixture"}"#.utf8)))
            }
            return try await next(request)
        }
        try await withClient(kind, server: server, configure: { $0.middleware = [fixture] }) { client in
            let received = try await client.send(Endpoint<Article>(path: "/json"))
            #expect(received == Article(id: 42, title: "fixture"))
            #expect(server.requests.isEmpty)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func middlewareHoldsRequestsUntilAGateOpens(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        let gate = Gate()
        let hold = ClosureMiddleware { request, next in
            await gate.wait()
            return try await next(request)
        }
        try await withClient(kind, server: server, configure: { $0.middleware = [hold] }) { client in
            let handles = (0..<3).map { _ in client.start(Endpoint<Article>(path: "/json").deduplication(.disabled)) }
            var held = false
            let end = ContinuousClock.now + .seconds(30)
            while !held && ContinuousClock.now < end {
                held = await gate.waiting == 3
                if !held { try await Task.sleep(for: .milliseconds(5)) }
            }
            #expect(held)
            #expect(server.requests.isEmpty)
            await gate.open()
            for handle in handles { #expect(try await handle.value.id == 1) }
            #expect(server.requests.count == 3)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func retryCallsNextAgainWithAReplayableBody(_ kind: TransportKind) async throws {
        let server = try await http1Server(numbering: { request, attempt in
            attempt == 1 ? .text("try again", status: 503) : await Routes.standard(request)
        })
        let retry = ClosureMiddleware { request, next in
            let first = try await next(request)
            guard first.status == .serviceUnavailable else { return first }
            return try await next(request)
        }
        try await withClient(kind, server: server, configure: { $0.middleware = [retry] }) { client in
            let echo = try await client.send(Endpoint<Echo>(method: .post, path: "/echo", body: .json(Article(id: 1, title: "again"))))
            #expect(echo.body.contains("again"))
            #expect(server.requests.count == 2)
            #expect(server.requests.map(\.body) == [server.requests[0].body, server.requests[0].body])
        }
    }

    /// RFC 9110 §15.4.8 and §15.4.9: a 307 or 308 must be followed with the same method and
    /// content, which a one-shot body cannot give twice. The 3xx is the answer (kind
    /// `httpStatus`, as the endpoint accepts 2xx only), and the body went out once.
    @Test(arguments: TransportKind.allCases, [307, 308])
    func aOneShotBodyRedirectedWithItsMethodKeptIsNotSentAgain(_ kind: TransportKind, status: Int) async throws {
        let server = try await http1Server { request in
            request.path == "/old" ? ScriptedResponse(status: status, headers: [("Location", "/new")]) : .text("moved")
        }
        let chunks = AsyncStream<Data> { continuation in
            continuation.yield(Data("once".utf8))
            continuation.finish()
        }
        try await withClient(kind, server: server) { client in
            let endpoint = Endpoint<Data>(
                method: .post, path: "/old", body: .body(.stream(chunks, length: 4, contentType: "text/plain")), decoding: .data)
            let error = await expectCourierError { _ = try await client.send(endpoint) }
            #expect(error?.kind == .httpStatus, "\(String(describing: error))")
            #expect(error?.status?.code == status)
            #expect(server.requests.map(\.path) == ["/old"])
            #expect(server.requests.first?.body == Data("once".utf8))
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aOneShotBodyIsNeverSentTwice(_ kind: TransportKind) async throws {
        let server = try await http1Server { _ in .text("try again", status: 503) }
        let retry = ClosureMiddleware { request, next in
            let first = try await next(request)
            guard first.status == .serviceUnavailable else { return first }
            return try await next(request)
        }
        let chunks = AsyncStream<Data> { continuation in
            continuation.yield(Data("once".utf8))
            continuation.finish()
        }
        try await withClient(kind, server: server, configure: { $0.middleware = [retry] }) { client in
            let endpoint = Endpoint<Data>(
                method: .post, path: "/upload", body: .body(.stream(chunks, length: 4, contentType: "text/plain")), decoding: .data)
            let error = await expectCourierError { _ = try await client.send(endpoint) }
            #expect(error?.kind == .invalidRequest)
            #expect(error?.message.contains("one-shot") == true)
            #expect(server.requests.count == 1)
            #expect(server.requests.first?.body == Data("once".utf8))
        }
    }

    @Test(arguments: TransportKind.allCases)
    func middlewareChangesTheResponse(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        let rewrite = ClosureMiddleware { request, next in
            var response = try await next(request)
            let body = try await response.body.collect(upTo: 1 << 20)
            let article = try JSONDecoder().decode(Article.self, from: body)
            response.body = .data(try JSONEncoder().encode(Article(id: article.id, title: article.title.uppercased())))
            response.head.headerFields[.contentLength] = nil
            return response
        }
        try await withClient(kind, server: server, configure: { $0.middleware = [rewrite] }) { client in
            let received = try await client.send(Endpoint<Article>(path: "/json"))
            #expect(received.title == "HELLO")
        }
    }

    @Test(arguments: TransportKind.allCases)
    func clientMiddlewareRunsBeforeEndpointMiddlewareAndResponsesUnwindInReverse(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        let trail = Locked<[String]>([])
        func tracer(_ name: String) -> ClosureMiddleware {
            ClosureMiddleware { request, next in
                trail.withLock { $0.append("→\(name)") }
                let response = try await next(request)
                trail.withLock { $0.append("←\(name)") }
                return response
            }
        }
        try await withClient(kind, server: server, configure: { $0.middleware = [tracer("c1"), tracer("c2")] }) { client in
            _ = try await client.send(Endpoint<Article>(path: "/json", middleware: [tracer("e1")]))
            #expect(trail.current == ["→c1", "→c2", "→e1", "←e1", "←c2", "←c1"])
        }
    }
}
