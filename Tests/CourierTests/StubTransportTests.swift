import Courier
import CourierTesting
import Foundation
import HTTPTypes
import Testing

@Suite("CourierTesting's stub transport, for users' own tests")
struct StubTransportTests {
    @Test
    func answersFromTheClosureAndRecordsRequests() async throws {
        let stub = StubTransport { request in
            request.head.path == "/v2/missing" ? .status(.notFound) : .json(#"{"id":3,"title":"stubbed"}"#)
        }
        let client = Client(configuration: .init(transport: stub, baseURL: URL(string: "https://api.example.com/v2")!))
        let article = try await client.send(Endpoint<Article>(method: .post, path: "/articles", body: .json(Article(id: 3, title: "new"))))
        #expect(article == Article(id: 3, title: "stubbed"))
        let error = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/missing")) }
        #expect(error?.status == .notFound)
        #expect(stub.requests.map(\.head.path) == ["/v2/articles", "/v2/missing"])
        #expect(stub.requests.first?.head.method == .post)
        let sent = try #require(stub.requests.first?.body?.bytes)
        #expect(try JSONDecoder().decode(Article.self, from: sent) == Article(id: 3, title: "new"))
    }

    // The stub is itself the transport under test here (no socket is involved), so these run once.
    @Test
    func aRouteTableAnswersByMethodAndPathPattern() async throws {
        let stub = StubTransport(routes: [
            .init(.get, "/articles/*", .json(#"{"id":1,"title":"one"}"#)),
            .init(.post, "/articles", .json(#"{"id":2,"title":"created"}"#, status: .created)),
            .init(.get, "/search?q=swift", .json(#"{"id":3,"title":"found"}"#)),
            .init(nil, "/offline/**", failing: CourierError(.transport, "no route to host")),
            .init(.get, "/slow", delay: .milliseconds(50), .json(#"{"id":4,"title":"late"}"#)),
        ])
        let client = Client(
            configuration: .init(transport: stub, baseURL: URL(string: "https://api.example.com")!) {
                $0.retry = .never
                $0.debugOptions = .off
            })
        #expect(try await client.send(Endpoint<Article>(path: "/articles/17")).title == "one")
        #expect(try await client.send(Endpoint<Article>(method: .post, path: "/articles")).title == "created")
        #expect(
            try await client.send(Endpoint<Article>(path: "/search", query: [URLQueryItem(name: "q", value: "swift")])).title == "found")
        let started = ContinuousClock.now
        #expect(try await client.send(Endpoint<Article>(path: "/slow")).title == "late")
        #expect(ContinuousClock.now - started >= .milliseconds(50))
        let offline = await expectCourierError { _ = try await client.send(Endpoint<Article>(method: .put, path: "/offline/a/b")) }
        #expect(offline?.kind == .transport)
        // Nothing matches: a clear error naming the request, never a silent 200.
        for (method, path) in [(HTTPRequest.Method.get, "/articles/17/comments"), (.delete, "/articles"), (.get, "/search")] {
            let unmatched = await expectCourierError { _ = try await client.send(Endpoint<Article>(method: method, path: path)) }
            #expect(unmatched?.kind == .invalidRequest)
            #expect(unmatched?.message.contains("no stub route for \(method.rawValue) \(path)") == true)
        }
    }

    @Test
    func aDelayedRouteIsCancellable() async throws {
        let stub = StubTransport(routes: [.init(.get, "/never", delay: .seconds(3600), .status(.ok))])
        let events = CountingMonitor()
        let client = Client(
            configuration: .init(transport: stub, baseURL: URL(string: "https://api.example.com")!) {
                $0.debugOptions = .off
                $0.eventMonitors = [events]
            })
        let handle = client.start(Endpoint<Article>(path: "/never"))
        // Cancelled while the stub waits out its delay, not before the request reached it.
        #expect(await eventually { events.count("attempt") == 1 })
        handle.cancel()
        let error = await expectCourierError { _ = try await handle.value }
        #expect(error?.kind == .cancelled)
    }

    /// A streamed request body is recorded as the bytes sent, and the closure sees them too: the
    /// stub read them, so nothing else could.
    @Test
    func aStreamedRequestBodyIsRecordedAsItsBytes() async throws {
        let seen = Locked<Data?>(nil)
        let stub = StubTransport { request in
            seen.withLock { $0 = request.body?.bytes }
            return .status(.ok)
        }
        let client = Client(configuration: .init(transport: stub, baseURL: URL(string: "https://api.example.com")!))
        let content = Data((0..<600_000).map { UInt8(truncatingIfNeeded: $0) })
        _ = try await client.send(streamedUpload(content))
        #expect(stub.requests.first?.body?.bytes == content)
        #expect(seen.current == content)
    }

    /// The answer to HEAD, and a 204 or 304 answer, carry no body, as over a real connection
    /// (RFC 9110 §9.3.2, §15.3.5, §15.4.5; RFC 9112 §6.3), even when the closure gives one.
    @Test(arguments: [(HTTPRequest.Method.head, 200), (.get, 204), (.get, 304), (.get, 200)])
    func responsesWithoutBodyComeWithout(_ method: HTTPRequest.Method, _ status: Int) async throws {
        let stub = StubTransport { _ in
            RawResponse(
                head: HTTPResponse(status: .init(code: status), headerFields: [.contentLength: "5"]), body: .data(Data("hello".utf8)))
        }
        let head = HTTPRequest(method: method, scheme: "https", authority: "api.example.com", path: "/a")
        let response = try await stub.send(Request(head: head))
        let body = try await response.body.collect(upTo: 1 << 20, deadline: .now + .seconds(10))
        #expect(body == (method == .get && status == 200 ? Data("hello".utf8) : Data()))
        #expect(response.head.headerFields[.contentLength] == "5")
    }
}
