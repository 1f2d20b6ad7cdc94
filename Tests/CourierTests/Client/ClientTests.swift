import Courier
import CourierTestServer
import Foundation
import HTTPTypes
import Testing

@Suite("Client sends endpoints over real sockets")
struct ClientTests {
    @Test(arguments: TransportKind.allCases)
    func sendDecodesJSONIntoTheEndpointsType(kind: TransportKind) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            let article = try await client.send(Endpoint<Article>(path: "/json"))
            #expect(article == Article(id: 1, title: "Hello"))
        }
    }

    @Test(arguments: TransportKind.allCases)
    func responseCarriesStatusHeadersVersionAndDuration(kind: TransportKind) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            let response = try await client.response(Endpoint<Article>(path: "/json"))
            #expect(response.status == .ok)
            #expect(response.headers[.contentType] == "application/json")
            #expect(response.version == .http1_1)
            #expect(response.duration > .zero)
            #expect(response.byteCount == 24)
            #expect(response.url?.path == "/json")
        }
    }

    @Test(arguments: TransportKind.allCases)
    func jsonBodyQueryAndHeadersReachTheServer(kind: TransportKind) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server, configure: { $0.defaultHeaders[.userAgent] = "CourierTests" }) { client in
            let endpoint = Endpoint<Echo>(
                name: "echo.post", method: .post, path: "/echo",
                query: ["q": "a b&c", "page": "2"],
                headers: [HTTPField.Name("X-Trace")!: "t-1"],
                body: .json(Article(id: 9, title: "Posted"))
            )
            let echo = try await client.send(endpoint)
            #expect(echo.method == "POST")
            #expect(echo.uri == "/echo?page=2&q=a%20b%26c")
            #expect(echo.headers["x-trace"] == "t-1")
            #expect(echo.headers["user-agent"] == "CourierTests")
            #expect(echo.headers["content-type"] == "application/json")
            let sent = try JSONDecoder().decode(Article.self, from: Data(echo.body.utf8))
            #expect(sent == Article(id: 9, title: "Posted"))
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aBaseURLsPathAndQueryFrameEveryEndpointsPath(kind: TransportKind) async throws {
        // RFC 3986 §5.2: paths are resolved under the base's path; a base with a query (an API
        // key) keeps it on every request. Such a base once sent every endpoint to the base itself.
        let server = try await http1Server { request in .text(request.uri) }
        let (transport, shutdown) = makeTransport(kind)
        let base = try #require(URL(string: "\(server.baseURL.absoluteString)/v1/?key=a%2Bb"))
        let client = Client(configuration: .init(transport: transport, baseURL: base))
        #expect(try await client.send(Endpoint<String>(path: "/users", decoding: .string)) == "/v1/users?key=a%2Bb")
        #expect(
            try await client.send(Endpoint<String>(path: "users/7", query: ["page": "2"], decoding: .string))
                == "/v1/users/7?key=a%2Bb&page=2")
        // An empty path, or a query alone, keeps the base's path as written (§5.2.2), its
        // trailing `/` included: a JSON-RPC endpoint (`path: ""`) at `…/rpc/` went to `…/rpc`.
        #expect(try await client.send(Endpoint<String>(path: "", decoding: .string)) == "/v1/?key=a%2Bb")
        #expect(try await client.send(Endpoint<String>(path: "?q=x", decoding: .string)) == "/v1/?q=x&key=a%2Bb")
        // Without a trailing `/`, none is added.
        let bare = Client(
            configuration: .init(transport: transport, baseURL: server.baseURL.appendingPathComponent("v1")))
        #expect(try await bare.send(Endpoint<String>(path: "", decoding: .string)) == "/v1")
        #expect(try await bare.send(Endpoint<String>(path: "?q=x", decoding: .string)) == "/v1?q=x")
        #expect(try await bare.send(Endpoint<String>(path: "users", decoding: .string)) == "/v1/users")
        // A fragment is no part of the target (RFC 9110 §7.1), and it must not hide the query.
        #expect(
            try await client.send(Endpoint<String>(path: "/items#top", query: ["page": "2"], decoding: .string))
                == "/v1/items?key=a%2Bb&page=2")
        try await shutdown()
        try await server.stop()
    }

    @Test(arguments: TransportKind.allCases)
    func credentialsInDefaultFieldsStayWithTheBaseURLsOrigin(kind: TransportKind) async throws {
        // RFC 9110 §15.4 (as on a redirect): a presigned URL from the API, or a third party's,
        // sent through the same client got the client's and the service's Authorization and
        // cookies (a presigned storage URL then refuses the request). Other default fields go.
        let api = try await http1Server()
        let storage = try await http1Server { request in
            .text(
                "auth=\(request.header("authorization") ?? "-") cookie=\(request.header("cookie") ?? "-") ua=\(request.header("user-agent") ?? "-") api=\(request.header("x-api") ?? "-") key=\(request.header("x-api-key") ?? "-")"
            )
        }
        let (transport, shutdown) = makeTransport(kind)
        let servers = ServerDirectory(
            urls: ["api": [.develop: api.baseURL]], buildDefault: .develop, isReleaseBuild: false, store: InMemoryEnvironmentStore())
        let client = Client(
            configuration: .init(transport: transport, baseURL: api.baseURL) {
                $0.defaultHeaders[.authorization] = "Bearer s3cret"
                $0.defaultHeaders[.cookie] = "sid=1"
                $0.defaultHeaders[.userAgent] = "App/1"
                $0.defaultHeaders[HTTPField.Name("X-Api-Key")!] = "k1"
                $0.servers = servers
                $0.serviceDefaults["api"] = ServiceDefaults(
                    headers: [.authorization: "Bearer service", HTTPField.Name("X-Api")!: "2", HTTPField.Name("X-Api-Key")!: "k2"])
            })
        let url = storage.baseURL.absoluteString + "/bucket/a?sig=abc"
        #expect(try await client.send(Endpoint<String>(path: url, decoding: .string)) == "auth=- cookie=- ua=App/1 api=- key=-")
        #expect(
            try await client.send(Endpoint<String>(path: url, decoding: .string).service("api")) == "auth=- cookie=- ua=App/1 api=2 key=-")
        // The endpoint's own fields are the app's choice, and go.
        #expect(
            try await client.send(Endpoint<String>(path: url, headers: [.authorization: "AWS4 x"], decoding: .string))
                == "auth=AWS4 x cookie=- ua=App/1 api=- key=-")
        // The base's own origin, written as an absolute URL, still gets them.
        let home = try await client.send(Endpoint<Echo>(path: api.baseURL.absoluteString + "/echo"))
        #expect(home.headers["authorization"] == "Bearer s3cret")
        #expect(home.headers["x-api-key"] == "k1")
        // A client without a base URL has no origin to keep them to: they go, as the app set them.
        let baseless = Client(configuration: .init(transport: transport) { $0.defaultHeaders[.authorization] = "Bearer s3cret" })
        // (The user agent differs: FoundationNetworking adds one of its own, README "fields the platform adds".)
        #expect(try await baseless.send(Endpoint<String>(path: url, decoding: .string)).hasPrefix("auth=Bearer s3cret cookie=- ua="))
        try await shutdown()
        try await api.stop()
        try await storage.stop()
    }

    @Test(arguments: TransportKind.allCases)
    func formBodyIsURLEncoded(kind: TransportKind) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            let echo = try await client.send(Endpoint<Echo>(method: .post, path: "/echo", body: .form(["name": "Zoë & co", "a": "1+1"])))
            #expect(echo.body == "a=1%2B1&name=Zo%C3%AB+%26+co")
            #expect(echo.headers["content-type"] == "application/x-www-form-urlencoded")
        }
    }

    @Test(arguments: TransportKind.allCases)
    func rawBytesStringAndNoContentDecodings(kind: TransportKind) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            let echo = try await client.send(
                Endpoint<Echo>(method: .put, path: "/echo", body: .data(Data([0x41, 0x42]), contentType: "application/octet-stream")))
            #expect(echo.body == "AB")
            #expect(echo.headers["content-type"] == "application/octet-stream")
            let data = try await client.send(Endpoint<Data>(path: "/text", decoding: .data))
            #expect(data == Data("plain words".utf8))
            let text = try await client.send(Endpoint<String>(path: "/text", decoding: .string))
            #expect(text == "plain words")
            let response = try await client.response(Endpoint<Void>(method: .delete, path: "/no-content", decoding: .none))
            #expect(response.status.code == 204)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func reformerMapsTheRawResponseToAnyType(kind: TransportKind) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            let endpoint = Endpoint<Int>(
                path: "/text",
                decoding: .reform { body, head in
                    #expect(head.status == .ok)
                    return body.count
                })
            let count = try await client.send(endpoint)
            #expect(count == 11)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func unacceptedStatusThrowsWithStatusHeadersAndBody(kind: TransportKind) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/status/503")) }
            #expect(error?.kind == .httpStatus)
            #expect(error?.status?.code == 503)
            #expect(error?.headers?[.contentType] == "text/plain; charset=utf-8")
            #expect(error?.bodyExcerpt() == "status body 503")
            #expect(error?.shortDescription == "http_status_503")
        }
    }

    @Test(arguments: TransportKind.allCases)
    func startReturnsAHandleWhoseCancelStopsTheRequestOnTheWire(kind: TransportKind) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            let handle = client.start(Endpoint<Article>(path: "/stall"))
            #expect(await eventually { server.requests.count == 1 })
            handle.cancel()
            let error = await expectCourierError { _ = try await handle.value }
            #expect(error?.kind == .cancelled)
            #expect(await eventually { server.abandonedCount == 1 })
        }
    }

    @Test(arguments: TransportKind.allCases)
    func cancellingAHeldStreamedBodyStopsItOnTheWire(kind: TransportKind) async throws {
        // `ByteStream.cancel()` did nothing on AsyncHTTPClient (its body ends only when its
        // iterator goes): the response still held, the server went on sending and the connection
        // stayed busy, while the scheduler had given the slot back.
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            let response = try await client.stream(Endpoint<Data>(path: "/slow-body", decoding: .data))
            response.body.cancel()
            #expect(await eventually { server.abandonedCount == 1 })
            #expect(client.traffic.inFlight == 0)
            // Still held: a read after the cancel fails, it does not wait for the stalled body.
            var iterator = response.body.makeAsyncIterator()
            let error = await expectCourierError { _ = try await iterator.next() }
            #expect(error?.kind == .cancelled, "\(String(describing: error))")
            withExtendedLifetime(response) {}
        }
    }

    @Test(arguments: TransportKind.allCases)
    func leavingAStreamedBodysLoopEarlyStopsItOnTheWire(kind: TransportKind) async throws {
        // The body can be iterated once: a loop left early gives it up, even while the response
        // is still held (as AsyncHTTPClient's own iterator did before the body had a reader that
        // could be cancelled).
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            let response = try await client.stream(Endpoint<Data>(path: "/big-chunked", decoding: .data))
            for try await _ in response.body { break }
            #expect(await eventually { server.abandonedCount == 1 })
            #expect(await eventually { client.traffic.inFlight == 0 })
            withExtendedLifetime(response) {}
        }
    }

    @Test(arguments: TransportKind.allCases)
    func cancellingTheSwiftTaskCancelsTheHTTPRequest(kind: TransportKind) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            let task = Task { try await client.send(Endpoint<Article>(path: "/stall")) }
            #expect(await eventually { server.requests.count == 1 })
            task.cancel()
            let result = await task.result
            #expect((try? result.get()) == nil)
            #expect((result.failure as? CourierError)?.kind == .cancelled)
            #expect(await eventually { server.abandonedCount == 1 })
        }
    }

    @Test(arguments: TransportKind.allCases)
    func startedHandleDeliversTheResponse(kind: TransportKind) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            let handle = client.start(Endpoint<Article>(path: "/json"))
            let value = try await handle.value
            let response = try await handle.response
            #expect(value.title == "Hello")
            #expect(response.status == .ok)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func severalClientsCoexistWithTheirOwnConfiguration(kind: TransportKind) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server, configure: { $0.defaultHeaders[.userAgent] = "one" }) { first in
            let second = Client(
                configuration: .init(transport: first.configuration.transport, baseURL: server.baseURL) {
                    $0.defaultHeaders[.userAgent] = "two"
                })
            async let a = first.send(Endpoint<Echo>(path: "/echo"))
            async let b = second.send(Endpoint<Echo>(path: "/echo"))
            let (echoA, echoB) = try await (a, b)
            #expect(echoA.headers["user-agent"] == "one")
            #expect(echoB.headers["user-agent"] == "two")
        }
    }

    @Test
    func relativePathWithoutBaseURLIsAnInvalidRequest() async throws {
        let client = Client(configuration: .init(transport: URLSessionTransport()))
        let error = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/json")) }
        #expect(error?.kind == .invalidRequest)
    }
}

extension Result {
    var failure: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}
