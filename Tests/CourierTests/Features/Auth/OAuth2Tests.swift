import CourierAsyncHTTPClient
import CourierTestServer
import Crypto
import Foundation
import HTTPTypes
import InMemoryLogging
import Logging
import Testing

@testable import Courier

/// An OAuth2 token endpoint and a protected resource in one in-process server.
final class OAuthServer: Sendable {
    struct State {
        var issued = 0
        var valid: Set<String> = []
        var refreshCalls = 0
        var refreshFails = false
        var alwaysUnauthorized = false
        var passwordGrants = 0
        /// `expires_in` sent as a string of digits, as some servers do.
        var expiresInAsString = false
        /// `scope` sent as a JSON list, not the string RFC 6749 §3.3 asks for.
        var scopeAsList = false
        /// The `expires_in` of the tokens issued.
        var lifetime = 3600
        /// A refresh is answered with this instead (a proxy's error page, another OAuth error).
        var refreshAnswer: ScriptedResponse?
    }

    let state = Locked(State())
    /// Holds `/slow` requests before their token is checked, until a test opens it.
    let slowGate = Gate()

    func issue() -> String {
        self.state.withLock { state in
            state.issued += 1
            let token = "t-\(state.issued)"
            state.valid = [token]
            return token
        }
    }

    func revokeAll() { self.state.withLock { $0.valid = [] } }

    func respond(_ request: RecordedRequest) async -> ScriptedResponse {
        if request.path == "/oauth/token" {
            let form = String(decoding: request.body, as: UTF8.self)
            if form.contains("grant_type=refresh_token") {
                let (fail, answer) = self.state.withLock { state -> (Bool, ScriptedResponse?) in
                    state.refreshCalls += 1
                    return (state.refreshFails, state.refreshAnswer)
                }
                try? await Task.sleep(for: .milliseconds(50))
                if let answer { return answer }
                if fail { return .json(#"{"error":"invalid_grant","error_description":"refresh token revoked"}"#, status: 400) }
            } else if form.contains("grant_type=password") {
                guard form.contains("username=ada"), form.contains("password=s3cret") else {
                    return .json(#"{"error":"invalid_grant"}"#, status: 400)
                }
                self.state.withLock { $0.passwordGrants += 1 }
            }
            let token = self.issue()
            let (asString, lifetime) = self.state.withLock { ($0.expiresInAsString, $0.lifetime) }
            let expiresIn = asString ? #""\#(lifetime)""# : "\(lifetime)"
            let scope = self.state.withLock { $0.scopeAsList } ? #","scope":["read"]"# : ""
            return .json(
                #"{"access_token":"\#(token)","token_type":"Bearer","expires_in":\#(expiresIn),"refresh_token":"r-\#(token)"\#(scope)}"#)
        }
        let authorization = request.header("authorization") ?? ""
        if request.path == "/scoped" {
            return .text(
                "no", status: 401, headers: [("WWW-Authenticate", #"Bearer realm="api", error="insufficient_scope", scope="admin""#)])
        }
        if request.path == "/nope" { return .json(#"{"error":"missing","access_token":"body-secret"}"#, status: 404) }
        if request.path.hasPrefix("/slow") { await self.slowGate.wait() }
        let ok = self.state.withLock { state in
            !state.alwaysUnauthorized && authorization.hasPrefix("Bearer ") && state.valid.contains(String(authorization.dropFirst(7)))
        }
        guard ok else { return .text("no", status: 401, headers: [("WWW-Authenticate", #"Bearer realm="api", error="invalid_token""#)]) }
        return .json(#"{"id":1,"title":"\#(authorization.dropFirst(7))"}"#)
    }
}

@Suite("OAuth2: one refresh for many requests, stale-token retries, failure handling")
struct OAuth2Tests {
    func setUp(
        _ kind: TransportKind,
        token: OAuth2Token?,
        configuration: OAuth2Authenticator.Configuration = .init(),
        store: (any CredentialStore)? = nil,
        events: Locked<Int> = Locked(0),
        tokenClient configureTokenClient: (inout Client.Configuration) -> Void = { _ in },
        _ body: (Client, OAuth2Authenticator, OAuthServer, TestServer) async throws -> Void
    ) async throws {
        let oauth = OAuthServer()
        let server = try await http1Server(oauth.respond)
        if let token { oauth.state.withLock { $0.valid = [token.accessToken] } }
        let (transport, shutdown) = makeTransport(kind)
        let tokenClient = Client(configuration: .init(transport: transport, configure: configureTokenClient))
        let auth = OAuth2Authenticator(
            tokenEndpoint: OAuth2TokenEndpoint(
                url: server.baseURL.appendingPathComponent("oauth/token"), clientID: "courier-tests", clientSecret: "client-secret"),
            tokenClient: tokenClient,
            store: store ?? InMemoryCredentialStore(token),
            configuration: configuration
        ) { _ in events.withLock { $0 += 1 } }
        let client = Client(
            configuration: .init(transport: transport, baseURL: server.baseURL) {
                $0.middleware = [auth]
                $0.scheduling = .init(maxConcurrentRequests: 256, maxRequestsPerHost: 256)
            })
        do {
            try await body(client, auth, oauth, server)
        } catch {
            try? await shutdown()
            try? await server.stop()
            throw error
        }
        try await shutdown()
        try await server.stop()
    }

    static let fresh = OAuth2Token(accessToken: "t-0", refreshToken: "r-0", expiresAt: Date().addingTimeInterval(3600))
    static let expired = OAuth2Token(accessToken: "t-0", refreshToken: "r-0", expiresAt: Date().addingTimeInterval(-10))

    @Test(arguments: TransportKind.allCases)
    func twoHundredRequestsWithAnExpiredTokenCauseExactlyOneRefresh(_ kind: TransportKind) async throws {
        try await self.setUp(kind, token: Self.expired) { client, auth, oauth, _ in
            let results = await withTaskGroup(of: Bool.self) { group in
                for index in 0..<200 {
                    group.addTask { (try? await client.send(Endpoint<Article>(path: "/api/\(index)"))) != nil }
                }
                return await group.reduce(into: [Bool]()) { $0.append($1) }
            }
            #expect(results.filter { $0 }.count == 200)
            #expect(oauth.state.withLock { $0.refreshCalls } == 1)
            #expect(auth.refreshCount == 1)
            #expect(auth.token?.accessToken == "t-1")
        }
    }

    /// RFC 6749 §6 (and §4.1.3, by reference to Appendix B): the token request is
    /// `application/x-www-form-urlencoded`, also when the token client's default `Content-Type`
    /// is JSON, an app's usual default: the form's own type wins over a client-wide default.
    @Test(arguments: TransportKind.allCases)
    func theTokenRequestStaysAFormUnderAJSONDefault(_ kind: TransportKind) async throws {
        try await self.setUp(kind, token: Self.expired, tokenClient: { $0.defaultHeaders[.contentType] = "application/json" }) {
            client, _, oauth, server in
            _ = try await client.send(Endpoint<Article>(path: "/api/1"))
            #expect(oauth.state.withLock { $0.refreshCalls } == 1)
            let tokenRequest = try #require(server.requests.first { $0.path == "/oauth/token" })
            #expect(tokenRequest.header("Content-Type") == "application/x-www-form-urlencoded")
        }
    }

    @Test(arguments: TransportKind.allCases)
    func insufficientScopeIsNotFixedByANewToken(_ kind: TransportKind) async throws {
        // RFC 6750 §3.1: `insufficient_scope` asks for another grant, not another token; the
        // 401 reaches the caller and the token is not refreshed (nor rotated).
        let fresh = OAuth2Token(accessToken: "t-0", refreshToken: "r-0", expiresAt: Date().addingTimeInterval(3600))
        try await self.setUp(kind, token: fresh) { client, auth, oauth, server in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/scoped")) }
            #expect(error?.kind == .httpStatus)
            #expect(error?.status == .unauthorized)
            #expect(oauth.state.withLock { $0.refreshCalls } == 0)
            #expect(auth.token?.accessToken == "t-0")
            #expect(server.requests.filter { $0.path == "/scoped" }.count == 1)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aLifetimeSentAsAStringIsReadAndTheRotatedRefreshTokenKept(_ kind: TransportKind) async throws {
        // RFC 6749 §5.1 says `expires_in` is a number; servers that send "3600" must not make a
        // refresh fail after the server has rotated the refresh token (it would be lost).
        try await self.setUp(kind, token: Self.expired) { client, auth, oauth, _ in
            oauth.state.withLock { $0.expiresInAsString = true }
            let article = try await client.send(Endpoint<Article>(path: "/api/1"))
            #expect(article.title == "t-1")
            #expect(auth.token?.refreshToken == "r-t-1")
            let lifetime = try #require(auth.token?.expiresAt).timeIntervalSinceNow
            #expect(lifetime > 3000 && lifetime <= 3600)
        }
    }

    /// A credential store whose saves fail while it is told to (a locked keychain).
    final class FailingSaveStore: CredentialStore {
        struct Refused: Error {}
        private let state: Locked<(token: OAuth2Token?, failing: Bool)>
        init(_ token: OAuth2Token?) { self.state = Locked((token, false)) }
        var stored: OAuth2Token? { self.state.withLock { $0.token } }
        func fail(_ failing: Bool) { self.state.withLock { $0.failing = failing } }
        func load() throws -> OAuth2Token? { self.state.withLock { $0.token } }
        func save(_ token: OAuth2Token?) throws {
            try self.state.withLock { state in
                if state.failing { throw Refused() }
                state.token = token
            }
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aRotatedTokenTheStoreFailedToSaveIsSavedBeforeTheNextRequest(_ kind: TransportKind) async throws {
        // RFC 6749 §6: the server may issue a new refresh token and revoke the old one; a store
        // left with the old one makes the next launch present a revoked token (and sign in again).
        let store = FailingSaveStore(Self.expired)
        store.fail(true)
        try await self.setUp(kind, token: Self.expired, store: store) { client, auth, oauth, _ in
            let first = try await client.send(Endpoint<Article>(path: "/api/1"))
            #expect(first.title == "t-1")
            #expect(auth.token?.refreshToken == "r-t-1")
            #expect(store.stored?.refreshToken == "r-0")  // the save failed
            // Still failing: the request goes on with the token it has.
            let second = try await client.send(Endpoint<Article>(path: "/api/1"))
            #expect(second.title == "t-1")
            #expect(store.stored?.refreshToken == "r-0")
            store.fail(false)
            _ = try await client.send(Endpoint<Article>(path: "/api/1"))
            #expect(store.stored == auth.token)
            #expect(store.stored?.refreshToken == "r-t-1")
            #expect(oauth.state.withLock { $0.refreshCalls } == 1)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aBearerTokenIsNeverSentInClearTextBeyondLoopback(_ kind: TransportKind) async throws {
        // RFC 6750 §5.3: clients MUST use TLS when they send bearer tokens. Plain http to this
        // machine's loopback (the test server) stays allowed (RFC 8252 §7.3).
        try await self.setUp(kind, token: Self.fresh) { client, auth, oauth, server in
            // A client whose home is a clear-text origin: its requests are the token's to go with.
            let (transport, shutdown) = makeTransport(kind)
            let remote = Client(
                configuration: .init(transport: transport, baseURL: URL(string: "http://api.courier-test.invalid")!) {
                    $0.middleware = [auth]
                })
            let error = await expectCourierError { _ = try await remote.send(Endpoint<Article>(path: "/api/1")) }
            try await shutdown()
            #expect(error?.kind == .invalidRequest)
            #expect(error?.message.contains("RFC 6750") == true)
            #expect(server.requests.isEmpty)
            #expect(oauth.state.withLock { $0.refreshCalls } == 0)
            // Loopback is allowed (names: the test below).
            let article = try await client.send(Endpoint<Article>(path: "/api/1"))
            #expect(article.title == "t-0")
            #expect(server.requests.first?.header("authorization") == "Bearer t-0")
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aTokenGoesOnlyToItsAudience(_ kind: TransportKind) async throws {
        // RFC 6750 §5.3: clients MUST ensure bearer tokens are not leaked to unintended parties.
        // A presigned download URL the API hands out, sent through the same client, reaches
        // another origin: it goes without the token, and without refreshing an expired one.
        let oauth = OAuthServer()
        oauth.state.withLock { $0.valid = ["t-0"] }
        let api = try await http1Server(oauth.respond)
        let storage = try await http1Server { _ in .text("file") }
        let (transport, shutdown) = makeTransport(kind)
        var configuration = OAuth2Authenticator.Configuration()
        // Another path of the same origin names the same audience.
        configuration.audience = [api.baseURL.appendingPathComponent("v2")]
        let auth = OAuth2Authenticator(
            tokenEndpoint: OAuth2TokenEndpoint(url: api.baseURL.appendingPathComponent("oauth/token"), clientID: "courier-tests"),
            tokenClient: Client(configuration: .init(transport: transport)), store: InMemoryCredentialStore(Self.expired),
            configuration: configuration)
        let client = Client(configuration: .init(transport: transport, baseURL: api.baseURL) { $0.middleware = [auth] })
        let file = try await client.send(Endpoint<String>(path: storage.baseURL.absoluteString + "/bucket/a?sig=abc", decoding: .string))
        #expect(file == "file")
        #expect(storage.requests.count == 1)
        #expect(storage.requests.first?.header("authorization") == nil)
        #expect(oauth.state.withLock { $0.refreshCalls } == 0)
        // The API's own origin still gets it (refreshed, as it had expired).
        let article = try await client.send(Endpoint<Article>(path: "/api/1"))
        #expect(article.title == "t-1")
        #expect(api.requests.last?.header("authorization") == "Bearer t-1")
        // An app's own Authorization for the other party is left as it is.
        _ = try await client.send(
            Endpoint<String>(path: storage.baseURL.absoluteString + "/b", headers: [.authorization: "AWS4 x"], decoding: .string))
        #expect(storage.requests.last?.header("authorization") == "AWS4 x")
        try await shutdown()
        try await api.stop()
        try await storage.stop()
    }

    @Test(arguments: TransportKind.allCases)
    func withoutAnAudienceTheTokenStaysAtTheClientsOrigin(_ kind: TransportKind) async throws {
        // RFC 6750 §5.3 (no leak to unintended parties): with no audience named, the token goes
        // where the client's own default credential fields go, its base URL's origin; an absolute
        // URL to another origin goes without it, and without refreshing an expired one.
        let oauth = OAuthServer()
        oauth.state.withLock { $0.valid = ["t-0"] }
        let api = try await http1Server(oauth.respond)
        let storage = try await http1Server { _ in .text("file") }
        let (transport, shutdown) = makeTransport(kind)
        let auth = OAuth2Authenticator(
            tokenEndpoint: OAuth2TokenEndpoint(url: api.baseURL.appendingPathComponent("oauth/token"), clientID: "courier-tests"),
            tokenClient: Client(configuration: .init(transport: transport)), store: InMemoryCredentialStore(Self.expired))
        let client = Client(configuration: .init(transport: transport, baseURL: api.baseURL) { $0.middleware = [auth] })
        let file = try await client.send(Endpoint<String>(path: storage.baseURL.absoluteString + "/bucket/a?sig=abc", decoding: .string))
        #expect(file == "file")
        #expect(storage.requests.count == 1)
        #expect(storage.requests.first?.header("authorization") == nil)
        #expect(oauth.state.withLock { $0.refreshCalls } == 0)
        // An absolute URL of the client's own origin is home: it gets the token (refreshed).
        let article = try await client.send(Endpoint<Article>(path: api.baseURL.absoluteString + "/api/1"))
        #expect(article.title == "t-1")
        #expect(api.requests.last?.header("authorization") == "Bearer t-1")
        // A client without a base URL has no home to keep it to: it goes where the app sends it.
        let unbased = Client(configuration: .init(transport: transport) { $0.middleware = [auth] })
        _ = try await unbased.send(Endpoint<String>(path: storage.baseURL.absoluteString + "/c", decoding: .string))
        #expect(storage.requests.last?.header("authorization") == "Bearer t-1")
        try await shutdown()
        try await api.stop()
        try await storage.stop()
    }

    @Test
    func onlyLoopbackHostsCountAsLoopback() {
        for host in ["localhost", "api.localhost", "127.0.0.1", "127.1.2.3", "::1"] {
            #expect(OAuth2Authenticator.isLoopback(host), "\(host)")
        }
        for host in [
            "127.0.0.1.example.com", "127.0.0", "1127.0.0.1", "localhost.example", "10.0.0.1", "::2", "127.0.0.256", "127.+0.0.1",
            "127.-0.0.1", "",
        ] {
            #expect(!OAuth2Authenticator.isLoopback(host), "\(host)")
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aScopeSentAsAListDoesNotFailTheRefreshNorLoseTheRotatedRefreshToken(_ kind: TransportKind) async throws {
        // RFC 6749 §3.3 and §5.1: `scope` is a string; §6: the new refresh token replaces the
        // old. A list in its place must not fail a refresh the server has already rotated.
        try await self.setUp(kind, token: Self.expired) { client, auth, oauth, _ in
            oauth.state.withLock { $0.scopeAsList = true }
            let article = try await client.send(Endpoint<Article>(path: "/api/1"))
            #expect(article.title == "t-1")
            #expect(auth.token?.refreshToken == "r-t-1")
            #expect(oauth.state.withLock { $0.refreshCalls } == 1)
        }
    }

    @Test
    func theAuthorizationURLKeepsTheEndpointsOwnQueryAsWritten() throws {
        // The endpoint's query is the provider's (`prompt=select+account`, a `+` meaning a space
        // there): it stays byte for byte; the request's own items follow, percent-encoded.
        let request = try OAuth2AuthorizationRequest(
            authorizationEndpoint: URL(string: "https://id.example/authorize?prompt=select+account&hd=a%2Bb")!, clientID: "app+1",
            redirectURI: "courier://callback", scope: "openid profile", state: "s", codeVerifier: String(repeating: "v", count: 43)
        )
        let query = try #require(request.url.query(percentEncoded: true))
        #expect(
            query.hasPrefix(
                "prompt=select+account&hd=a%2Bb&response_type=code&client_id=app%2B1&redirect_uri=courier%3A%2F%2Fcallback&scope=openid%20profile&state=s&code_challenge="
            ))
        #expect(query.hasSuffix("&code_challenge_method=S256"))
    }

    @Test
    func aTokenOfATypeTheClientCannotUseIsRefused() throws {
        // RFC 6749 §7.1: the client must not use a token whose type it does not understand; the
        // type is compared without regard to case (§5.1); none given is taken as Bearer.
        #expect(throws: CourierError.self) {
            _ = try OAuth2TokenEndpoint.decodeToken(Data(#"{"access_token":"a","token_type":"mac"}"#.utf8))
        }
        #expect(try OAuth2TokenEndpoint.decodeToken(Data(#"{"access_token":"a","token_type":"bEaReR"}"#.utf8)).accessToken == "a")
        #expect(try OAuth2TokenEndpoint.decodeToken(Data(#"{"access_token":"a"}"#.utf8)).accessToken == "a")
        #expect(try OAuth2TokenEndpoint.decodeToken(Data(#"{"access_token":"a","expires_in":"nan"}"#.utf8)).expiresAt == nil)
    }

    @Test(arguments: TransportKind.allCases)
    func lateUnauthorizedForAStaleTokenIsRetriedWithoutASecondRefresh(_ kind: TransportKind) async throws {
        let fresh = OAuth2Token(accessToken: "t-0", refreshToken: "r-0", expiresAt: Date().addingTimeInterval(3600))
        try await self.setUp(kind, token: fresh) { client, auth, oauth, server in
            let slow = client.start(Endpoint<Article>(path: "/slow/a"))
            #expect(await eventually { server.requests.contains { $0.path == "/slow/a" } })
            oauth.revokeAll()
            let quick = try await client.send(Endpoint<Article>(path: "/api/b"))
            #expect(quick.title == "t-1")
            // The slow request's stale token is checked only now, after the refresh.
            await oauth.slowGate.open()
            let late = try await slow.value
            #expect(late.title == "t-1")
            #expect(oauth.state.withLock { $0.refreshCalls } == 1)
            #expect(server.requests.filter { $0.path == "/slow/a" }.map { $0.header("authorization") } == ["Bearer t-0", "Bearer t-1"])
        }
    }

    @Test(arguments: TransportKind.allCases)
    func refreshFailureRaisesOneEventAndEveryRequestFailsTyped(_ kind: TransportKind) async throws {
        let events = Locked(0)
        try await self.setUp(kind, token: Self.expired, events: events) { client, _, oauth, _ in
            oauth.state.withLock { $0.refreshFails = true }
            let errors = await withTaskGroup(of: CourierError?.self) { group in
                for index in 0..<200 {
                    group.addTask {
                        do {
                            _ = try await client.send(Endpoint<Article>(path: "/api/\(index)"))
                            return nil
                        } catch let error as CourierError {
                            return error
                        } catch {
                            return nil
                        }
                    }
                }
                return await group.reduce(into: [CourierError?]()) { $0.append($1) }
            }
            #expect(errors.count == 200)
            #expect(errors.allSatisfy { $0?.kind == .authenticationRequired })
            #expect(errors.allSatisfy { $0?.presentation == .reLogin })
            #expect(events.current == 1)
            #expect(oauth.state.withLock { $0.refreshCalls } == 1)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func heldRequestsContinueOnceNewCredentialsAreSupplied(_ kind: TransportKind) async throws {
        var configuration = OAuth2Authenticator.Configuration()
        configuration.holdWhenSignedOut = true
        let events = Locked(0)
        try await self.setUp(kind, token: Self.expired, configuration: configuration, events: events) { client, auth, oauth, server in
            oauth.state.withLock { $0.refreshFails = true }
            let handles = (0..<5).map { client.start(Endpoint<Article>(path: "/api/held-\($0)")) }
            #expect(await eventually { events.current == 1 })
            // All five held, waiting for the sign-in: none went out without a token.
            #expect(await eventually { auth.heldCount == 5 })
            #expect(server.requests.filter { $0.path.hasPrefix("/api") }.isEmpty)
            try await auth.signIn(username: "ada", password: "s3cret")
            for handle in handles {
                let article = try await handle.value
                #expect(article.title == "t-1")
            }
            #expect(oauth.state.withLock { $0.passwordGrants } == 1)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func refreshCapStopsALoop(_ kind: TransportKind) async throws {
        var configuration = OAuth2Authenticator.Configuration()
        configuration.maxRefreshes = 2
        try await self.setUp(
            kind, token: OAuth2Token(accessToken: "t-0", refreshToken: "r-0", expiresAt: Date().addingTimeInterval(3600)),
            configuration: configuration
        ) { client, _, oauth, _ in
            oauth.state.withLock { $0.alwaysUnauthorized = true }
            for index in 0..<4 {
                let response = try? await client.response(
                    Endpoint<Void>(path: "/api/\(index)", acceptedStatuses: 200..<500, decoding: .none))
                if let response { #expect(response.status.code == 401) }
            }
            #expect(oauth.state.withLock { $0.refreshCalls } == 2)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func passwordGrantSavesCredentialsInAnOwnerOnlyFile(_ kind: TransportKind) async throws {
        let oauth = OAuthServer()
        let server = try await http1Server(oauth.respond)
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("courier-credentials-\(UUID().uuidString).json")
        defer { try? FileManager.default.removeItem(at: file) }
        let (transport, shutdown) = makeTransport(kind)
        let auth = OAuth2Authenticator(
            tokenEndpoint: OAuth2TokenEndpoint(url: server.baseURL.appendingPathComponent("oauth/token"), clientID: "public-app"),
            tokenClient: Client(configuration: .init(transport: transport)),
            store: FileCredentialStore(url: file)
        )
        let wrong = await expectCourierError { try await auth.signIn(username: "ada", password: "nope") }
        #expect(wrong?.status?.code == 400)
        try await auth.signIn(username: "ada", password: "s3cret")
        let attributes = try FileManager.default.attributesOfItem(atPath: file.path)
        #expect((attributes[.posixPermissions] as? NSNumber)?.intValue == 0o600)
        #expect(try FileCredentialStore(url: file).load()?.accessToken == "t-1")
        let form = String(decoding: server.requests.last?.body ?? Data(), as: UTF8.self)
        #expect(form.contains("client_id=public-app"))
        try await shutdown()
        try await server.stop()
    }

    @Test
    func wwwAuthenticateChallengesAreParsed() {
        let challenges = AuthenticationChallenge.parse(
            #"bearer realm="api", error="invalid_token", error_description="The access token expired", Basic realm="x""#)
        #expect(challenges.count == 2)
        #expect(challenges[0].scheme == "bearer")
        #expect(challenges[0].parameters["error"] == "invalid_token")
        #expect(challenges[0].parameters["error_description"] == "The access token expired")
        #expect(challenges[1] == AuthenticationChallenge(scheme: "basic", parameters: ["realm": "x"]))
        // RFC 9110 §11.2: a token68 (with its trailing `=`) ends its challenge; the next one is kept.
        let negotiate = AuthenticationChallenge.parse(#"Negotiate YIIB+/a==, Bearer error="invalid_token""#)
        #expect(
            negotiate == [
                AuthenticationChallenge(scheme: "negotiate", parameters: [:]),
                AuthenticationChallenge(scheme: "bearer", parameters: ["error": "invalid_token"]),
            ])
        #expect(
            AuthenticationChallenge.parse("Basic realm=x, Bearer") == [
                AuthenticationChallenge(scheme: "basic", parameters: ["realm": "x"]),
                AuthenticationChallenge(scheme: "bearer", parameters: [:]),
            ])
        // RFC 9110 §11.2: white space may surround an auth-param's `=` (BWS); a scheme after a
        // comma is still the next challenge, not a parameter without a value.
        #expect(
            AuthenticationChallenge.parse("Bearer error = \"invalid_request\" ,realm =\tapi, Basic realm=x") == [
                AuthenticationChallenge(scheme: "bearer", parameters: ["error": "invalid_request", "realm": "api"]),
                AuthenticationChallenge(scheme: "basic", parameters: ["realm": "x"]),
            ])
    }
}
