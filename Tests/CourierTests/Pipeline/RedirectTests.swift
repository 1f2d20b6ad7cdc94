import Courier
import CourierTestServer
import Foundation
import HTTPTypes
import Testing

@Suite("Redirects are followed by the pipeline, the same way on every transport")
struct RedirectTests {
    @Test(arguments: TransportKind.allCases)
    func followsAChainOfRedirects(kind: TransportKind) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            let response = try await client.response(Endpoint<Echo>(path: "/redirect/3"))
            #expect(response.value.uri == "/echo")
            #expect(response.url?.path == "/echo")
            #expect(server.requests.map(\.path) == ["/redirect/3", "/redirect/2", "/redirect/1", "/echo"])
        }
    }

    /// RFC 9110 §10.2.2: `Location` is a singleton. Sent twice it reached the redirect stage as
    /// one value joined with ", " and was followed as one URL; two different targets are refused,
    /// the same one twice is that target.
    @Test(arguments: TransportKind.allCases)
    func twoDifferentLocationsAreRefusedAndTheSameOneTwiceIsFollowed(kind: TransportKind) async throws {
        let server = try await http1Server { request in
            switch request.path {
            case "/two": return ScriptedResponse(status: 302, headers: [("Location", "/echo"), ("Location", "/other")])
            case "/same": return ScriptedResponse(status: 302, headers: [("Location", "/echo"), ("Location", "/echo")])
            default: return await Routes.standard(request)
            }
        }
        try await withClient(kind, server: server) { client in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Echo>(path: "/two")) }
            #expect(error?.kind == .redirect)
            #expect(error?.message.contains("2 different Location targets") == true, "\(String(describing: error))")
            #expect(server.requests.map(\.path) == ["/two"])
            let echo = try await client.send(Endpoint<Echo>(path: "/same"))
            #expect(echo.uri == "/echo")
        }
    }

    /// RFC 9110 §10.2.2: a 3xx without `Location` names nothing to follow, so it is the answer:
    /// kind `httpStatus` with its status, sent once. On Linux FoundationNetworking keeps a
    /// redirect's head from the delegate and, with no `Location`, ends the task without it: the
    /// response "ended without a head", kind `transport`, and the retry stage sent it again as a
    /// connection failure.
    @Test(arguments: TransportKind.allCases)
    func aRedirectWithoutALocationIsTheAnswerAndIsSentOnce(kind: TransportKind) async throws {
        let server = try await http1Server { request in
            let status = Int(request.path.dropFirst()) ?? 500
            return .text("moved, but not saying where", status: status)
        }
        try await withClient(kind, server: server, configure: { $0.retry = RetryPolicy(maxAttempts: 3) }) { client in
            for status in [301, 302, 303, 307, 308] {
                let before = server.requests.count
                let error = await expectCourierError { _ = try await client.send(Endpoint<Echo>(path: "/\(status)")) }
                #expect(error?.kind == .httpStatus, "\(status): \(String(describing: error))")
                #expect(error?.status?.code == status)
                #expect(server.requests.count == before + 1, "\(status) was sent \(server.requests.count - before) times")
                let body = error?.body.map { String(decoding: $0, as: UTF8.self) } ?? ""
                switch kind {
                case .asyncHTTPClient:
                    #expect(body == "moved, but not saying where")
                case .urlSession:
                    // FoundationNetworking keeps the body of a redirect it did not ask about.
                    #if !canImport(Darwin)
                    #expect(body.isEmpty)
                    #endif
                }
            }
        }
    }

    /// RFC 3986 §3.2.2: a host holds no URI delimiter. `Location: https://pinned.test%23/x` was
    /// followed with the host decoded, `pinned.test#`: the pins, the cookie jar and the per-host
    /// slots looked up that name while the transport, parsing the URL again, connected to
    /// `pinned.test` — past a CA pin and its refusal of clear text. Such a target is refused.
    @Test(arguments: TransportKind.allCases)
    func aLocationWhoseHostHidesADelimiterIsRefused(kind: TransportKind) async throws {
        let server = try await http1Server { request in
            let host = String(request.path.dropFirst(3))
            return ScriptedResponse(status: 302, headers: [("Location", "http://\(host)/echo")])
        }
        try await withClient(kind, server: server) { client in
            for host in ["127.0.0.1%23", "127.0.0.1%2F", "127.0.0.1%3F", "127.0.0.1%40", "127.0.0.1%20"] {
                let before = server.requests.count
                let error = await expectCourierError { _ = try await client.send(Endpoint<Echo>(path: "/h/\(host)")) }
                #expect(error?.kind == .redirect, "\(host): \(String(describing: error))")
                #expect(server.requests.count == before + 1)
            }
        }
    }

    /// RFC 9110 §4.2.4: userinfo in a URI that came from elsewhere is treated as an error. A
    /// `Location` of `http://user:secret@host/` was followed to `host`, the userinfo dropped
    /// without a word; `https://bank.test@evil.test/` reads as bank.test and goes to evil.test.
    @Test(arguments: TransportKind.allCases)
    func aLocationWithUserinfoIsRefusedWithoutShowingIt(kind: TransportKind) async throws {
        let server = try await http1Server { request in
            guard request.path == "/userinfo" else { return await Routes.standard(request) }
            let port = request.header("host")?.split(separator: ":").last.map(String.init) ?? "80"
            return ScriptedResponse(status: 302, headers: [("Location", "http://user:s3cr3t@127.0.0.1:\(port)/echo")])
        }
        try await withClient(kind, server: server) { client in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Echo>(path: "/userinfo")) }
            #expect(error?.kind == .redirect, "\(String(describing: error))")
            #expect(error.map { !"\($0)".contains("s3cr3t") } == true)
            #expect(server.requests.map(\.path) == ["/userinfo"])
        }
    }

    /// RFC 9110 §10.2.3 and §5.3: `Retry-After: 3600` sent twice arrived as "3600, 3600", which
    /// is neither seconds nor a date, so the retry came after a short backoff instead of the
    /// policy stopping at a wait past its `maxRetryAfter`.
    @Test(arguments: TransportKind.allCases)
    func aRetryAfterSentTwiceIsReadAsItsOneValue(kind: TransportKind) async throws {
        let server = try await http1Server { _ in .text("busy", status: 503, headers: [("Retry-After", "3600"), ("Retry-After", "3600")]) }
        try await withClient(kind, server: server, configure: { $0.retry = RetryPolicy(maxAttempts: 3) }) { client in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Echo>(path: "/busy")) }
            #expect(error?.kind == .httpStatus)
            #expect(error?.status?.code == 503)
            #expect(server.requests.count == 1)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func stopsAtTheConfiguredLimit(kind: TransportKind) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server, configure: { $0.redirects.maxRedirects = 2 }) { client in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Echo>(path: "/redirect/5")) }
            #expect(error?.kind == .redirect)
            #expect(server.requests.count == 3)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func detectsALoop(kind: TransportKind) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Echo>(path: "/loop")) }
            #expect(error?.kind == .redirect)
            #expect(error?.message.contains("loop") == true)
            #expect(server.requests.count == 1)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aRedirectBackAfterSettingACookieIsNoLoop(kind: TransportKind) async throws {
        // RFC 9110 §15.4 asks a client to detect infinite loops: a hop that sets a cookie and
        // sends back to the page (a consent or sign-in step) changes the next request, and is
        // followed; a chain that keeps setting cookies still ends at `maxRedirects`.
        let handler: TestServer.Handler = { request in
            switch request.path {
            case "/page":
                if request.header("Cookie")?.contains("consent=1") == true { return .text("welcome") }
                return ScriptedResponse(status: 302, headers: [("Location", "/page"), ("Set-Cookie", "consent=1; Path=/")])
            default:
                return ScriptedResponse(status: 302, headers: [("Location", "/forever"), ("Set-Cookie", "n=\(UUID().uuidString); Path=/")])
            }
        }
        let server = try await http1Server(handler)
        try await withClient(
            kind, server: server,
            configure: {
                $0.cookies = CookieJar()
                $0.redirects.maxRedirects = 4
            }
        ) { client in
            let page = try await client.response(Endpoint<String>(path: "/page", decoding: .string))
            #expect(page.value == "welcome")
            #expect(server.requests.map(\.path) == ["/page", "/page"])
            let error = await expectCourierError { _ = try await client.send(Endpoint<String>(path: "/forever", decoding: .string)) }
            #expect(error?.kind == .redirect)
            #expect(error?.message.contains("stopped after 4") == true, "\(String(describing: error))")
            #expect(server.requests.count == 2 + 5)
        }
        // Without a cookie jar the cookie changes nothing: a loop, found at its first repeat.
        let jarless = try await http1Server(handler)
        try await withClient(kind, server: jarless) { client in
            let error = await expectCourierError { _ = try await client.send(Endpoint<String>(path: "/page", decoding: .string)) }
            #expect(error?.kind == .redirect)
            #expect(error?.message.contains("loop") == true, "\(String(describing: error))")
            #expect(jarless.requests.count == 1)
        }
    }

    @Test(arguments: TransportKind.allCases, ["http:next", "https:evil.example/x", "http:/path"])
    func aLocationWithoutAHostIsRefused(kind: TransportKind, location: String) async throws {
        // RFC 9110 §4.2.1, §4.2.2: an http(s) URI with an empty host is invalid; it is neither
        // followed to a host made of its path nor sent to a URL without one.
        let server = try await http1Server { _ in ScriptedResponse(status: 307, headers: [("Location", location)]) }
        try await withClient(kind, server: server) { client in
            let error = await expectCourierError {
                _ = try await client.send(
                    Endpoint<Data>(
                        method: .post, path: "/form", body: .data(Data("secret=1".utf8), contentType: "text/plain"), decoding: .data))
            }
            #expect(error?.kind == .redirect)
            #expect(error?.message.contains("not an http(s) URL") == true, "\(String(describing: error))")
            #expect(server.requests.count == 1)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func seeOtherTurnsAPostIntoAGetWithoutBody(kind: TransportKind) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            var endpoint = Endpoint<Echo>(
                method: .post, path: "/see-other", body: .json(Article(id: 1, title: String(repeating: "x", count: 2000))))
            endpoint.compressesRequestBody = true
            let echo = try await client.send(endpoint)
            #expect(echo.method == "GET")
            #expect(echo.body.isEmpty)
            #expect(server.requests.first?.method == "POST")
            #expect(server.requests.first?.header("Content-Encoding") == "gzip")
            // RFC 9110 §15.4: the GET has no content, so no field describes any.
            for name in ["content-encoding", "content-type", "content-length"] { #expect(echo.headers[name] == nil, "\(name)") }
        }
    }

    // AsyncHTTPClient only: URLSession on Linux (FoundationNetworking) fails every request to an
    // IPv6 literal, redirected or not, with NSURLErrorBadURL (-1000) (README, platforms and transports).
    @Test(arguments: [TransportKind.asyncHTTPClient])
    func aRedirectToAnIPv6LiteralKeepsItsBrackets(kind: TransportKind) async throws {
        // RFC 3986 §3.2.2: an IP literal is bracketed in the authority (`[::1]:PORT`; `::1:PORT`
        // is no URL at all).
        let other = try await TestServer.start(.http1, host: "::1", handler: Routes.standard)
        let server = try await http1Server()

        try await withClient(kind, server: server) { client in
            let echo = try await client.send(Endpoint<Echo>(path: "/to", query: ["url": "http://[::1]:\(other.port)/echo"]))
            #expect(echo.uri == "/echo")
            #expect(echo.headers["host"] == "[::1]:\(other.port)")
            #expect(other.requests.count == 1)
        }
        try await other.stop()
    }

    @Test(arguments: TransportKind.allCases)
    func temporaryRedirectKeepsMethodAndBody(kind: TransportKind) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            let echo = try await client.send(Endpoint<Echo>(method: .put, path: "/temporary", body: .json(Article(id: 2, title: "kept"))))
            #expect(echo.method == "PUT")
            #expect(echo.body.contains("kept"))
        }
    }

    @Test(arguments: TransportKind.allCases, [301, 302])
    func movedAndFoundChangeOnlyAPostIntoAGet(kind: TransportKind, status: Int) async throws {
        // RFC 9110 §15.4.2 and §15.4.3: a user agent MAY change POST to GET after a 301 or 302,
        // and no other method: PUT, PATCH and DELETE go again as they were, body included.
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            for method in [HTTPRequest.Method.put, .patch, .delete] {
                let echo = try await client.send(
                    Endpoint<Echo>(
                        method: method, path: "/moved", query: ["status": "\(status)"], body: .json(Article(id: 3, title: "kept"))))
                #expect(echo.method == method.rawValue)
                #expect(echo.body.contains("kept"))
            }
            let post = try await client.send(
                Endpoint<Echo>(method: .post, path: "/moved", query: ["status": "\(status)"], body: .json(Article(id: 4, title: "gone"))))
            #expect(post.method == "GET")
            #expect(post.body.isEmpty)
            #expect(server.requests.map(\.method) == ["PUT", "PUT", "PATCH", "PATCH", "DELETE", "DELETE", "POST", "GET"])
        }
    }

    /// RFC 9110 §15.4: fields with security implications the caller added are removed on a hop
    /// to another origin, "not limited to Authorization and Cookie": also the ones the client's
    /// redactor hides as secrets (an API key, a CSRF token, a session token).
    @Test(arguments: TransportKind.allCases)
    func crossOriginRedirectDropsAuthorizationAndCookie(kind: TransportKind) async throws {
        let other = try await http1Server()
        let server = try await http1Server()
        let target = other.baseURL.appendingPathComponent("echo").absoluteString
        try await withClient(kind, server: server) { client in
            let endpoint = Endpoint<Echo>(
                path: "/to", query: ["url": target],
                headers: [
                    .authorization: "Bearer secret-token", .cookie: "session=abc", HTTPField.Name("X-Keep")!: "yes",
                    HTTPField.Name("X-Api-Key")!: "key 1", HTTPField.Name("X-CSRF-Token")!: "csrf", HTTPField.Name("X-Session-Token")!: "s",
                    HTTPField.Name("Ocp-Apim-Subscription-Key")!: "sub", HTTPField.Name("X-Sentry-Auth")!: "sentry",
                    HTTPField.Name("Idempotency-Key")!: "k1", HTTPField.Name("X-Authorization")!: "Bearer x",
                    HTTPField.Name("X-Forwarded-Authorization")!: "Bearer y",
                ]
            )
            let echo = try await client.send(endpoint)
            // Services' own key fields (their last word `key` or `auth`) stay home too; an
            // idempotency key is no credential.
            #expect(echo.headers["ocp-apim-subscription-key"] == nil)
            #expect(echo.headers["x-sentry-auth"] == nil)
            #expect(echo.headers["idempotency-key"] == "k1")
            #expect(echo.headers["authorization"] == nil)
            #expect(echo.headers["x-authorization"] == nil)
            #expect(echo.headers["x-forwarded-authorization"] == nil)
            #expect(echo.headers["cookie"] == nil)
            #expect(echo.headers["x-api-key"] == nil)
            #expect(echo.headers["x-csrf-token"] == nil)
            #expect(echo.headers["x-session-token"] == nil)
            #expect(echo.headers["x-keep"] == "yes")
            #expect(server.requests.first?.header("authorization") == "Bearer secret-token")
            #expect(server.requests.first?.header("x-api-key") == "key 1")
        }
        try await other.stop()
    }

    @Test(arguments: TransportKind.allCases)
    func sameOriginRedirectKeepsAuthorization(kind: TransportKind) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            let echo = try await client.send(
                Endpoint<Echo>(path: "/redirect/1", headers: [.authorization: "Bearer t", HTTPField.Name("X-Api-Key")!: "key 1"]))
            #expect(echo.headers["authorization"] == "Bearer t")
            #expect(echo.headers["x-api-key"] == "key 1")
        }
    }

    // Needs an HTTPS origin: on URLSession only where the test CA can be trusted (TransportKind.overTLS).
    @Test(arguments: TransportKind.overTLS)
    func httpsToHTTPDowngradeIsRefused(kind: TransportKind) async throws {
        let plain = try await http1Server()
        let server = try await tlsServer()
        let target = plain.baseURL.appendingPathComponent("echo").absoluteString
        try await withClient(kind, server: server) { client in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Echo>(path: "/to", query: ["url": target])) }
            #expect(error?.kind == .redirect)
            #expect(plain.requests.isEmpty)
            #expect(server.requests.map(\.path) == ["/to"])
        }
        try await plain.stop()
    }

    @Test(arguments: TransportKind.allCases)
    func redirectsCanBeTurnedOff(kind: TransportKind) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server, configure: { $0.redirects = .none }) { client in
            let response = try await client.response(Endpoint<Void>(path: "/redirect/1", acceptedStatuses: 200..<400, decoding: .none))
            #expect(response.status.code == 302)
            #expect(server.requests.count == 1)
        }
    }
}
