import Courier
import CourierAsyncHTTPClient
import CourierTestServer
import Crypto
import Foundation
import HTTPTypes
import InMemoryLogging
import Logging
import Testing

@Suite("Prerequisites, signing, redirects and secret hygiene")
struct SecurityHygieneTests {
    @Test(arguments: TransportKind.allCases)
    func errorsThatQuoteAURLHideItsSecrets(_ kind: TransportKind) async throws {
        // An authorization server's last redirect to an app's own scheme (RFC 8252 §7.1) carries
        // the code: the redirect error that quotes it, and the error for an endpoint whose
        // absolute URL cannot be read, hide what the redactor hides everywhere else.
        let server = try await http1Server { _ in
            ScriptedResponse(status: 302, headers: [("Location", "courier-app://callback?code=AUTHCODE&state=s")])
        }
        try await withClient(kind, server: server) { client in
            let redirect = await expectCourierError { _ = try await client.send(Endpoint<Data>(path: "/authorize", decoding: .data)) }
            #expect(redirect?.kind == .redirect)
            #expect(redirect?.description.contains("AUTHCODE") == false, "\(String(describing: redirect))")
            #expect(redirect?.description.contains("courier-app://callback") == true)
            let invalid = await expectCourierError {
                _ = try await client.send(Endpoint<Data>(path: "https://?access_token=SECRETTOKEN", decoding: .data))
            }
            #expect(invalid?.kind == .invalidRequest)
            #expect(invalid?.description.contains("SECRETTOKEN") == false, "\(String(describing: invalid))")
        }
    }

    @Test(arguments: TransportKind.allCases)
    func prerequisiteRunsOnceForFiftyConcurrentRequestsAndAgainAfterInvalidation(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        let fetches = Locked(0)
        let gate = PrerequisiteGate<String>(
            fetch: {
                fetches.withLock { $0 += 1 }
                try await Task.sleep(for: .milliseconds(100))
                return "crumb-\(fetches.current)"
            },
            apply: { crumb, request in
                request.head.headerFields[HTTPField.Name("X-Crumb")!] = crumb
            })
        try await withClient(kind, server: server, configure: { $0.middleware = [gate] }) { client in
            try await withThrowingTaskGroup(of: Echo.self) { group in
                for index in 0..<50 { group.addTask { try await client.send(Endpoint<Echo>(path: "/echo", query: ["i": "\(index)"])) } }
                for try await echo in group { #expect(echo.headers["x-crumb"] == "crumb-1") }
            }
            #expect(gate.runCount == 1)
            gate.invalidate()
            let after = try await client.send(Endpoint<Echo>(path: "/echo"))
            #expect(after.headers["x-crumb"] == "crumb-2")
            #expect(gate.runCount == 2)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aPrerequisiteThatNeverFinishesDoesNotHoldTheGateShut(_ kind: TransportKind) async throws {
        // The first fetch stalls (a bootstrap server that never answers): it ends at the gate's
        // fetch timeout, and the next request runs the prerequisite again instead of joining it.
        let server = try await http1Server()
        let fetches = Locked(0)
        let gate = PrerequisiteGate<String>(
            // Long enough for the second, immediate run to finish on a machine busy with the
            // whole suite; the first never finishes.
            fetchTimeout: .seconds(10),
            fetch: {
                let run = fetches.withLock { value -> Int in
                    value += 1
                    return value
                }
                if run == 1 { try await Task.sleep(for: .seconds(3600)) }
                return "crumb-\(run)"
            },
            apply: { crumb, request in
                request.head.headerFields[HTTPField.Name("X-Crumb")!] = crumb
            })
        try await withClient(kind, server: server, configure: { $0.middleware = [gate] }) { client in
            let stalled = await expectCourierError { _ = try await client.send(Endpoint<Echo>(path: "/echo", timeout: .seconds(60))) }
            #expect(stalled?.kind == .timeout)
            #expect(stalled?.message.contains("prerequisite") == true, "\(String(describing: stalled))")
            let after = try await client.send(Endpoint<Echo>(path: "/echo", timeout: .seconds(60)))
            #expect(after.headers["x-crumb"] == "crumb-2")
            #expect(gate.runCount == 2)
            #expect(server.requests.count == 1)
        }
    }

    @Test
    func reorderingARepeatedQueryParameterChangesTheSignedText() {
        // Items sort by name; one name's values keep their order: a server that reads the first
        // `amount` must not get a request whose signature was made for another order.
        func text(_ target: String) -> String {
            SignatureCanonicalForm.text(method: "GET", target: target, body: Data(), timestamp: "1", nonce: "n")
        }
        #expect(text("/t?amount=1&amount=1000") != text("/t?amount=1000&amount=1"))
        #expect(text("/t?b=2&a=1") == text("/t?a=1&b=2"))
        #expect(text("/t?b=2&a=1&b=1").contains("\na=1&b=2&b=1\n"))
        // A name that is a prefix of another sorts by its bytes before `=`: `a` before `a-b`.
        #expect(text("/t?a-b=1&a=2").contains("\na=2&a-b=1\n"))
        // A name written percent-encoded is the same name to the server: its order counts too.
        #expect(text("/t?amount=1&%61mount=1000") != text("/t?%61mount=1000&amount=1"))
        #expect(text("/t?%62=1&a=2").contains("\na=2&%62=1\n"))
        // A `+` in a name is a space to a server that reads the query as a form
        // (application/x-www-form-urlencoded), and a plus to one that does not: `a+b` is one name
        // with `a%20b` to the first, with `a%2Bb` to the second, and their order counts to each.
        // (Before: `a+b` and `a%20b` sorted apart, and both orders were signed alike.)
        #expect(text("/t?a+b=1&a%20b=2") != text("/t?a%20b=2&a+b=1"))
        #expect(text("/t?a+b=1&a%2Bb=2") != text("/t?a%2Bb=2&a+b=1"))
        #expect(text("/t?a%2Bb=1&z=3&a+b=2").contains("\na%2Bb=1&a+b=2&z=3\n"))
        // A percent-encoded byte is one byte in either letter case, UTF-8 or not.
        #expect(text("/t?%ff=1&%FF=2") != text("/t?%FF=2&%ff=1"))
        #expect(text("/t?%ff=1&%fe=2").contains("\n%fe=2&%ff=1\n"))
        // A `%` without two hex digits after it is a byte of the name as written.
        #expect(text("/t?%zz=1&%=2&%f=3").contains("\n%=2&%f=3&%zz=1\n"))
        // RFC 9110 §9.1: methods are case-sensitive; `patch` and `PATCH` are two methods.
        #expect(
            SignatureCanonicalForm.text(method: "patch", target: "/", body: Data(), timestamp: "1", nonce: "n")
                != SignatureCanonicalForm.text(method: "PATCH", target: "/", body: Data(), timestamp: "1", nonce: "n"))
        // A signature that is not base64 is a bad signature, not a crash or a pass.
        let verifier = SignatureVerifier(key: SymmetricKey(data: Data("k".utf8)))
        #expect(throws: SignatureVerifier.Rejection.badSignature) {
            try verifier.verify(
                method: "GET", target: "/t", body: Data(), signature: "!!not base64!!", timestamp: "\(Int(Date().timeIntervalSince1970))",
                nonce: "n1")
        }
    }

    @Test(arguments: TransportKind.allCases)
    func signedRequestsVerifyAndTamperedOnesAreRejected(_ kind: TransportKind) async throws {
        let key = SymmetricKey(data: Data("signing-key".utf8))
        let verifier = SignatureVerifier(key: key, maxSkew: 60)
        let outcomes = Locked<[String]>([])
        let server = try await http1Server { request in
            do {
                try verifier.verify(
                    method: request.method, target: request.uri, body: request.body,
                    signature: request.header("x-signature"), timestamp: request.header("x-signature-timestamp"),
                    nonce: request.header("x-signature-nonce"))
                outcomes.withLock { $0.append("ok") }
                return .json(#"{"id":1,"title":"verified"}"#)
            } catch {
                outcomes.withLock { $0.append("\(error)") }
                return .text("\(error)", status: 401)
            }
        }
        try await withClient(kind, server: server, configure: { $0.middleware = [RequestSigner(key: key, keyID: "k1")] }) { client in
            let article = try await client.send(
                Endpoint<Article>(method: .post, path: "/orders", query: ["b": "2", "a": "1"], body: .json(["item": 7])))
            #expect(article.title == "verified")
            let recorded = try #require(server.requests.last)
            // Replaying the exact same request: rejected for its nonce.
            #expect(throws: SignatureVerifier.Rejection.replayedNonce) {
                try verifier.verify(
                    method: recorded.method, target: recorded.uri, body: recorded.body, signature: recorded.header("x-signature"),
                    timestamp: recorded.header("x-signature-timestamp"), nonce: recorded.header("x-signature-nonce"))
            }
            // A changed body: a bad signature.
            #expect(throws: SignatureVerifier.Rejection.badSignature) {
                try verifier.verify(
                    method: recorded.method, target: recorded.uri, body: Data(#"{"item":8}"#.utf8),
                    signature: recorded.header("x-signature"), timestamp: recorded.header("x-signature-timestamp"), nonce: "fresh-nonce")
            }
            // An old timestamp: stale.
            #expect(throws: SignatureVerifier.Rejection.staleTimestamp) {
                try verifier.verify(
                    method: recorded.method, target: recorded.uri, body: recorded.body, signature: recorded.header("x-signature"),
                    timestamp: recorded.header("x-signature-timestamp"), nonce: recorded.header("x-signature-nonce"),
                    now: Date().addingTimeInterval(3600))
            }
            // Signed with the wrong key: the server refuses.
            let wrong = Client(
                configuration: .init(transport: client.configuration.transport, baseURL: server.baseURL) {
                    $0.middleware = [RequestSigner(key: SymmetricKey(data: Data("other".utf8)))]
                })
            let error = await expectCourierError { _ = try await wrong.send(Endpoint<Article>(path: "/orders")) }
            #expect(error?.status?.code == 401)
            #expect(outcomes.current == ["ok", "badSignature"])
        }
    }

    @Test(arguments: TransportKind.allCases)
    func crossOriginRedirectCarriesNoAuthorizationCookieOrSignature(_ kind: TransportKind) async throws {
        let other = try await http1Server()
        let server = try await http1Server()
        let target = other.baseURL.appendingPathComponent("echo").absoluteString
        let key = SymmetricKey(data: Data("k".utf8))
        try await withClient(kind, server: server, configure: { $0.middleware = [RequestSigner(key: key)] }) { client in
            let echo = try await client.send(
                Endpoint<Echo>(path: "/to", query: ["url": target], headers: [.authorization: "Bearer secret", .cookie: "sid=1"]))
            #expect(echo.headers["authorization"] == nil)
            #expect(echo.headers["cookie"] == nil)
            #expect(echo.headers["x-signature"] == nil)
            #expect(echo.headers["x-signature-nonce"] == nil)
            #expect(server.requests.first?.header("x-signature") != nil)
        }
        try await other.stop()
    }

    @Test(arguments: TransportKind.allCases)
    func aSignatureStaysWithItsOrigin(_ kind: TransportKind) async throws {
        // The signature covers neither scheme nor host: signed for a presigned URL or a third
        // party's API, it could be replayed at the API within the verifier's skew. A service's
        // signer signs only its server's requests (as its credential fields stay home, RFC 9110
        // §15.4), and a client's signer only its audience's.
        let api = try await http1Server()
        let other = try await http1Server()
        let key = SymmetricKey(data: Data("k".utf8))
        let servers = ServerDirectory(
            urls: ["api": [.develop: api.baseURL]], buildDefault: .develop, isReleaseBuild: false, store: InMemoryEnvironmentStore())
        let elsewhere = other.baseURL.absoluteString + "/echo"
        try await withClient(
            kind, server: api,
            configure: {
                $0.servers = servers
                $0.serviceDefaults["api"] = ServiceDefaults(middleware: [RequestSigner(key: key)])
                // A service the directory has no server for: it has no home, so anywhere is elsewhere.
                $0.serviceDefaults["unlisted"] = ServiceDefaults(middleware: [RequestSigner(key: key)])
            }
        ) { client in
            let away = try await client.send(Endpoint<Echo>(path: elsewhere).service("api"))
            #expect(away.headers["x-signature"] == nil)
            #expect(away.headers["x-signature-nonce"] == nil)
            #expect(try await client.send(Endpoint<Echo>(path: elsewhere).service("unlisted")).headers["x-signature"] == nil)
            let home = try await client.send(Endpoint<Echo>(path: "/echo").service("api"))
            #expect(home.headers["x-signature"] != nil)
            let audienced = Client(
                configuration: .init(transport: client.configuration.transport, baseURL: api.baseURL) {
                    $0.middleware = [RequestSigner(key: key, audience: [api.baseURL])]
                })
            #expect(try await audienced.send(Endpoint<Echo>(path: elsewhere)).headers["x-signature"] == nil)
            #expect(try await audienced.send(Endpoint<Echo>(path: "/echo")).headers["x-signature"] != nil)
            // Without an audience, every origin is signed (the default, documented).
            let everywhere = Client(
                configuration: .init(transport: client.configuration.transport, baseURL: api.baseURL) {
                    $0.middleware = [RequestSigner(key: key)]
                })
            #expect(try await everywhere.send(Endpoint<Echo>(path: elsewhere)).headers["x-signature"] != nil)
        }
        try await other.stop()
    }

    /// RFC 9110 §15.4 (as on a redirect to another origin): a service whose server the active
    /// environment does not list has no home to compare an absolute URL with, so its signer and
    /// credential fields — and the client's — stay back (they went anywhere when the client had
    /// no base URL). And RFC 3986 §3.1: `HTTP://` is a scheme (compared without case), not a
    /// path below the service's base to send its credentials to.
    @Test(arguments: TransportKind.allCases)
    func aServiceWithoutAServerHereKeepsItsCredentialsHome(_ kind: TransportKind) async throws {
        let api = try await http1Server()
        let other = try await http1Server()
        let key = SymmetricKey(data: Data("k".utf8))
        // `payments` has a server in release only; the active environment is develop.
        let servers = ServerDirectory(
            urls: ["api": [.develop: api.baseURL], "payments": [.release: api.baseURL]], buildDefault: .develop, isReleaseBuild: false,
            store: InMemoryEnvironmentStore())
        let elsewhere = other.baseURL.absoluteString + "/echo"
        try await withClient(
            kind, server: api,
            configure: {
                $0.baseURL = nil
                $0.servers = servers
                $0.defaultHeaders[.authorization] = "Bearer client-secret"
                $0.serviceDefaults["payments"] = ServiceDefaults(
                    middleware: [RequestSigner(key: key)], headers: [HTTPField.Name("X-Api-Key")!: "pay-secret"])
                $0.serviceDefaults["api"] = ServiceDefaults(middleware: [RequestSigner(key: key)])
            }
        ) { client in
            let away = try await client.send(Endpoint<Echo>(path: elsewhere).service("payments"))
            #expect(away.headers["x-signature"] == nil)
            #expect(away.headers["x-api-key"] == nil)
            #expect(away.headers["authorization"] == nil)
            #expect(other.requests.count == 1)

            let upper = "HTTP://" + (other.baseURL.host ?? "") + ":\(other.baseURL.port ?? 0)/echo"
            let shouted = try await client.send(Endpoint<Echo>(path: upper).service("api"))
            #expect(shouted.headers["x-signature"] == nil)
            #expect(other.requests.count == 2)
            #expect(other.requests.last?.uri == "/echo")
            #expect(api.requests.isEmpty)

            // At home, the service's signer signs (the test would pass for a client that signs nothing).
            let home = try await client.send(Endpoint<Echo>(path: "/echo").service("api"))
            #expect(home.headers["x-signature"] != nil)
            #expect(home.headers["authorization"] == "Bearer client-secret")
            // A client with neither a directory nor a base URL has no home for anything: its
            // service's defaults go with absolute URLs, as the app set them.
            let homeless = Client(
                configuration: .init(transport: client.configuration.transport) {
                    $0.serviceDefaults["payments"] = ServiceDefaults(
                        middleware: [RequestSigner(key: key)], headers: [HTTPField.Name("X-Api-Key")!: "pay-secret"])
                })
            let anywhere = try await homeless.send(Endpoint<Echo>(path: elsewhere).service("payments"))
            #expect(anywhere.headers["x-signature"] != nil)
            #expect(anywhere.headers["x-api-key"] == "pay-secret")
        }
        try await other.stop()
    }

    @Test(arguments: TransportKind.allCases, ["bad\r\nInjected: yes", "line\nbreak", "nul\u{0}byte"])
    func headerValuesWithControlCharactersAreRejectedBeforeSending(_ kind: TransportKind, value: String) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Echo>(path: "/echo").header("X-Note", value)) }
            #expect(error?.kind == .invalidRequest)
            let nameError = await expectCourierError { _ = try await client.send(Endpoint<Echo>(path: "/echo").header("X-\r\nEvil", "v")) }
            #expect(nameError?.kind == .invalidRequest)
            #expect(server.requests.isEmpty)
            let fine = try await client.send(Endpoint<Echo>(path: "/echo").header("X-Note", "plain"))
            #expect(fine.headers["x-note"] == "plain")
        }
    }

    @Test(arguments: TransportKind.allCases)
    func secretsNeverAppearInCapturedLogs(_ kind: TransportKind) async throws {
        let oauth = OAuthServer()
        let server = try await http1Server(oauth.respond)
        oauth.state.withLock { $0.valid = ["super-secret-token"] }
        let handler = InMemoryLogHandler()
        var logger = Logger(label: "test") { _ in handler }
        logger.logLevel = .debug
        let (transport, shutdown) = makeTransport(kind)
        let auth = OAuth2Authenticator(
            tokenEndpoint: OAuth2TokenEndpoint(
                url: server.baseURL.appendingPathComponent("oauth/token"), clientID: "c", clientSecret: "client-secret-value"),
            tokenClient: Client(configuration: .init(transport: transport) { $0.logger = logger }),
            store: InMemoryCredentialStore(
                OAuth2Token(accessToken: "super-secret-token", refreshToken: "refresh-secret", expiresAt: Date().addingTimeInterval(3600)))
        )
        let client = Client(
            configuration: .init(transport: transport, baseURL: server.baseURL) {
                $0.middleware = [auth]
                $0.logger = logger
            })
        _ = try await client.send(Endpoint<Article>(path: "/api", query: ["access_token": "query-secret", "api_key": "key-secret"]))
        oauth.revokeAll()
        _ = try await client.send(Endpoint<Article>(path: "/api/again"))
        let error = await expectCourierError {
            _ = try await client.send(
                Endpoint<Article>(path: "/nope", query: ["token": "another-secret"]).header("Cookie", "sid=cookie-secret"))
        }
        let text = handler.entries.map { "\($0.message)" }.joined(separator: "\n") + "\n" + (error?.description ?? "")
        #expect(handler.entries.count >= 8)
        #expect(error?.status?.code == 404)
        for secret in [
            "super-secret-token", "refresh-secret", "query-secret", "key-secret", "client-secret-value", "another-secret", "cookie-secret",
            "r-t-1", "body-secret",
        ] {
            #expect(!text.contains(secret), "log output leaks \(secret)")
        }
        try await shutdown()
        try await server.stop()
    }
}
