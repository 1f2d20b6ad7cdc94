import CourierTestServer
import Foundation
import Testing

@testable import Courier

/// A careless or hostile token endpoint, and tokens with lifetimes no server should send.
extension OAuth2Tests {
    /// RFC 6749 §5.1: `expires_in` is optional. A lifetime of zero or less is taken as none
    /// given: the token is used until a 401 says it expired, instead of being refreshed before
    /// every request until the refresh cap signs every request out.
    @Test(arguments: TransportKind.allCases, [0, -1])
    func aTokenIssuedWithALifetimeOfZeroOrLessIsUsedUntilRefused(_ kind: TransportKind, _ lifetime: Int) async throws {
        try await self.setUp(kind, token: Self.expired) { client, auth, oauth, _ in
            oauth.state.withLock { $0.lifetime = lifetime }
            for index in 1...6 {
                let article = try await client.send(Endpoint<Article>(path: "/api/\(index)"))
                #expect(article.title == "t-1")
            }
            #expect(oauth.state.withLock { $0.refreshCalls } == 1)
            #expect(auth.token?.expiresAt == nil)
        }
        #expect(try OAuth2TokenEndpoint.decodeToken(Data(#"{"access_token":"a","expires_in":"-5"}"#.utf8)).expiresAt == nil)
        // RFC 6749 §5.1: the lifetime is in seconds; under one second is as good as none.
        for fraction in ["0.5", "1e-9", #""0.001""#] {
            #expect(try OAuth2TokenEndpoint.decodeToken(Data(#"{"access_token":"a","expires_in":\#(fraction)}"#.utf8)).expiresAt == nil)
        }
        let lasting = try OAuth2TokenEndpoint.decodeToken(Data(#"{"access_token":"a","expires_in":1.5}"#.utf8))
        #expect(lasting.expiresAt.map { $0 > Date() } == true)
    }

    /// RFC 6749 §5.2: a refresh that fails for a reason other than the grant (the endpoint down,
    /// a 503) keeps the credentials, and does not count against the refresh limit: after more
    /// such failures than the limit, each request still fails with the endpoint's own error (not
    /// "sign in again"), and once the endpoint answers, the next request refreshes and succeeds.
    @Test(arguments: TransportKind.allCases)
    func refreshesThatFailOnTheWayDoNotUseUpTheRefreshLimit(_ kind: TransportKind) async throws {
        var configuration = OAuth2Authenticator.Configuration()
        configuration.maxRefreshes = 2
        let events = Locked(0)
        try await self.setUp(kind, token: Self.expired, configuration: configuration, events: events) { client, auth, oauth, _ in
            oauth.state.withLock { $0.refreshAnswer = .text("down for maintenance", status: 503) }
            for index in 0..<4 {
                let failure = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/api/\(index)")) }
                #expect(failure?.kind == .httpStatus, "\(String(describing: failure))")
                #expect(failure?.presentation != .reLogin)
            }
            #expect(oauth.state.withLock { $0.refreshCalls } == 4)
            oauth.state.withLock { $0.refreshAnswer = nil }
            let article = try await client.send(Endpoint<Article>(path: "/api/back"))
            #expect(article.title == "t-1")
            #expect(events.current == 0)
            #expect(auth.token?.accessToken == "t-1")
        }
    }

    /// RFC 6749 §5.1: a token lasts `expires_in`, so one inside its refresh margin still works.
    /// With the token endpoint stalled, each request made in the margin waited for the early
    /// refresh until its own deadline and failed with kind `timeout`. The request that started
    /// the refresh now waits for it for at most 5 seconds (at most half its time left), then goes
    /// with the token it has; one made while the refresh runs goes at once.
    @Test(arguments: TransportKind.allCases)
    func aStalledEarlyRefreshHoldsUpNoRequestWhoseTokenStillWorks(_ kind: TransportKind) async throws {
        var configuration = OAuth2Authenticator.Configuration()
        configuration.refreshMargin = .seconds(900)
        let events = Locked(0)
        let renewable = OAuth2Token(accessToken: "t-0", refreshToken: "r-0", expiresAt: Date().addingTimeInterval(600))
        try await self.setUp(kind, token: renewable, configuration: configuration, events: events) { client, auth, oauth, _ in
            auth.tokenReceived(ago: 3600)
            // The token endpoint sends its answer's head one byte every 30 seconds.
            oauth.state.withLock { $0.refreshAnswer = ScriptedResponse(status: 200, behaviour: .slowHead(interval: .seconds(30))) }
            var first = Endpoint<Article>(path: "/api/1")
            first.timeout = .seconds(30)
            let started = try await client.send(first)
            #expect(started.title == "t-0")
            var second = Endpoint<Article>(path: "/api/2")
            second.timeout = .seconds(30)
            let meanwhile = try await client.send(second)
            #expect(meanwhile.title == "t-0")
            #expect(oauth.state.withLock { $0.refreshCalls } == 1)
            #expect(auth.token?.accessToken == "t-0")
            #expect(events.current == 0)
        }
    }

    /// The refresh limit stops loops; a token renewed on time before it expires is none. An early
    /// refresh that worked counted against the limit, so short-lived tokens (20 seconds: six
    /// refreshes a minute against the default three) ended in "sign in again" once a token
    /// expired, or, as here, once a 401 asked for a refresh the limit no longer allowed.
    @Test(arguments: TransportKind.allCases)
    func anEarlyRefreshThatWorkedDoesNotUseUpTheRefreshLimit(_ kind: TransportKind) async throws {
        var configuration = OAuth2Authenticator.Configuration()
        configuration.refreshMargin = .seconds(900)
        configuration.maxRefreshes = 1
        let events = Locked(0)
        let renewable = OAuth2Token(accessToken: "t-0", refreshToken: "r-0", expiresAt: Date().addingTimeInterval(600))
        try await self.setUp(kind, token: renewable, configuration: configuration, events: events) { client, auth, oauth, _ in
            // Ten minutes from expiry, inside the fifteen-minute margin: refreshed early.
            auth.tokenReceived(ago: 3600)
            let early = try await client.send(Endpoint<Article>(path: "/api/1"))
            #expect(early.title == "t-1")
            // The server then refuses that token: the 401 needs a refresh, the first that counts.
            oauth.revokeAll()
            let after = try await client.send(Endpoint<Article>(path: "/api/2"))
            #expect(after.title == "t-2")
            #expect(oauth.state.withLock { $0.refreshCalls } == 2)
            #expect(events.current == 0)
        }
    }

    /// With `holdWhenSignedOut`, a refresh that failed on the way fails the request with its own
    /// error after one refresh: only a refusal of the grant holds requests for a sign-in, and
    /// asking again at once, in a loop, would fail alike.
    @Test(arguments: TransportKind.allCases)
    func aHeldRequestFailsWithTheErrorOfARefreshThatFailedOnTheWay(_ kind: TransportKind) async throws {
        var configuration = OAuth2Authenticator.Configuration()
        configuration.holdWhenSignedOut = true
        let events = Locked(0)
        try await self.setUp(kind, token: Self.expired, configuration: configuration, events: events) { client, auth, oauth, _ in
            oauth.state.withLock { $0.refreshAnswer = .text("down for maintenance", status: 503) }
            let failure = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/api/1")) }
            #expect(failure?.kind == .httpStatus, "\(String(describing: failure))")
            #expect(oauth.state.withLock { $0.refreshCalls } == 1)
            #expect(events.current == 0)
            #expect(auth.token?.refreshToken == "r-0")
        }
    }

    /// RFC 6749 §6 and §5.1: a refresh response without `scope` grants the scope the token had;
    /// the token keeps it.
    @Test(arguments: TransportKind.allCases)
    func aRefreshAnsweredWithoutAScopeKeepsTheScopeGranted(_ kind: TransportKind) async throws {
        let token = OAuth2Token(accessToken: "t-0", refreshToken: "r-0", expiresAt: Date().addingTimeInterval(-10), scope: "read write")
        try await self.setUp(kind, token: token) { client, auth, oauth, _ in
            _ = try await client.send(Endpoint<Article>(path: "/api/1"))
            #expect(oauth.state.withLock { $0.refreshCalls } == 1)
            #expect(auth.token?.accessToken == "t-1")
            #expect(auth.token?.scope == "read write")
        }
    }

    /// RFC 6749 §3.2 (the token endpoint MUST be reached over TLS), §2.3.1, and RFC 7009 §2: a
    /// token endpoint named with plain `http` on another host gets no password, refresh token or
    /// client secret: the grant fails with kind `invalidRequest` before anything is sent (there
    /// is no server at that name: a request would fail otherwise), and the revocation is skipped.
    @Test(arguments: TransportKind.allCases)
    func aTokenEndpointInClearTextOnAnotherHostGetsNoCredentials(_ kind: TransportKind) async throws {
        let (transport, shutdown) = makeTransport(kind)
        let monitor = CountingMonitor()
        let auth = OAuth2Authenticator(
            tokenEndpoint: OAuth2TokenEndpoint(
                url: URL(string: "http://id.example.com/token")!, clientID: "app", clientSecret: "s e c r e t",
                revocationURL: URL(string: "http://id.example.com/revoke")!),
            tokenClient: Client(configuration: .init(transport: transport) { $0.eventMonitors = [monitor] }),
            store: InMemoryCredentialStore(Self.expired)
        )
        let signIn = await expectCourierError { try await auth.signIn(username: "ada", password: "s3cret") }
        #expect(signIn?.kind == .invalidRequest)
        #expect(signIn?.message.contains("https") == true)
        // A request over https needs a refresh of the expired token: the refresh is refused.
        let api = Client(
            configuration: .init(transport: transport, baseURL: URL(string: "https://api.example.com")!) {
                $0.middleware = [auth]
                $0.eventMonitors = [monitor]
            })
        let refresh = await expectCourierError { _ = try await api.send(Endpoint<Article>(path: "/articles/1")) }
        #expect(refresh?.kind == .invalidRequest)
        #expect(refresh?.message.contains("token endpoint") == true, "\(String(describing: refresh))")
        #expect(try await auth.signOut(revokingTokens: true) == false)
        #expect(auth.token == nil)
        // A relative token URL is checked as the token client resolves it: against a base URL
        // in clear text on another host, it is refused too.
        let relative = OAuth2Authenticator(
            tokenEndpoint: OAuth2TokenEndpoint(url: URL(string: "oauth/token")!, clientID: "app", clientSecret: "s"),
            tokenClient: Client(
                configuration: .init(transport: transport, baseURL: URL(string: "http://id.example.com")!) {
                    $0.eventMonitors = [monitor]
                }),
            store: InMemoryCredentialStore())
        let resolved = await expectCourierError { try await relative.signIn(username: "ada", password: "s3cret") }
        #expect(resolved?.kind == .invalidRequest)
        // Nothing reached a transport: neither the grants nor the revocations, nor the request.
        #expect(monitor.count("attempt") == 0)
        try await shutdown()
    }

    /// A store that cannot delete the credentials (a locked keychain) does not keep them alive:
    /// after `signOut()` throws the store's error, no request sends the token.
    @Test(arguments: TransportKind.allCases)
    func aSignOutWhoseStoreFailsStillForgetsTheToken(_ kind: TransportKind) async throws {
        try await self.setUp(kind, token: Self.fresh) { client, auth, _, server in
            let failing = OAuth2Authenticator(
                tokenEndpoint: OAuth2TokenEndpoint(url: server.baseURL.appendingPathComponent("oauth/token"), clientID: "app"),
                tokenClient: client, store: UndeletableStore(Self.fresh))
            let signedIn = Client(
                configuration: .init(transport: client.configuration.transport, baseURL: server.baseURL) { $0.middleware = [failing] })
            _ = try await signedIn.send(Endpoint<Article>(path: "/api/before"))
            #expect(server.requests.last?.header("authorization") == "Bearer t-0")
            #expect(throws: UndeletableStore.Locked.self) { try failing.signOut() }
            #expect(failing.token == nil)
            let after = await expectCourierError { _ = try await signedIn.send(Endpoint<Article>(path: "/api/after")) }
            #expect(after?.kind == .authenticationRequired)
            #expect(!server.requests.contains { $0.path == "/api/after" })
            _ = auth
        }
    }

    /// RFC 6749 §5.2: only some error codes say the grant cannot succeed. A refresh answered
    /// with a proxy's HTML 400 or 401, or with `invalid_scope`, fails the request typed but keeps
    /// the credentials: no sign-out event, and the next request refreshes with the same refresh
    /// token once the endpoint answers again. `invalid_client` and `unsupported_grant_type` sign out.
    @Test(arguments: TransportKind.allCases, ["html 400", "html 401", "invalid_scope", "invalid_client", "unsupported_grant_type"])
    func aRefreshRefusedForAReasonOtherThanTheGrantKeepsTheCredentials(_ kind: TransportKind, _ answer: String) async throws {
        let events = Locked(0)
        try await self.setUp(kind, token: Self.expired, events: events) { client, auth, oauth, server in
            let response: ScriptedResponse =
                switch answer {
                case "html 400": .text("<html>Bad Request</html>", status: 400, headers: [("Content-Type", "text/html")])
                case "html 401": .text("<html>Unauthorized</html>", status: 401, headers: [("Content-Type", "text/html")])
                default: .json(#"{"error":"\#(answer)"}"#, status: 400)
                }
            oauth.state.withLock { $0.refreshAnswer = response }
            let failure = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/api/1")) }
            if answer == "invalid_client" || answer == "unsupported_grant_type" {
                #expect(failure?.kind == .authenticationRequired)
                #expect(events.current == 1)
                #expect(auth.token == nil)
                return
            }
            #expect(failure?.kind == .httpStatus)
            #expect(events.current == 0)
            #expect(auth.token?.refreshToken == "r-0")
            oauth.state.withLock { $0.refreshAnswer = nil }
            let article = try await client.send(Endpoint<Article>(path: "/api/2"))
            #expect(article.title == "t-1")
            let refreshes = server.requests.filter { $0.path == "/oauth/token" }
            #expect(refreshes.count == 2)
            #expect(refreshes.allSatisfy { String(decoding: $0.body, as: UTF8.self).contains("refresh_token=r-0") })
        }
    }

    /// A token from a credential store or from `supply` may name any expiry date: one 1e300
    /// seconds away is used like any long-lived token, never trapping where its refresh margin
    /// is worked out.
    @Test(arguments: TransportKind.allCases)
    func aTokenThatExpiresFarBeyondAnyLifetimeIsUsed(_ kind: TransportKind) async throws {
        let token = OAuth2Token(accessToken: "t-0", refreshToken: "r-0", expiresAt: Date(timeIntervalSinceNow: 1e300))
        try await self.setUp(kind, token: token) { client, _, oauth, server in
            let article = try await client.send(Endpoint<Article>(path: "/api/1"))
            #expect(article.title == "t-0")
            #expect(server.requests.last?.header("authorization") == "Bearer t-0")
            #expect(oauth.state.withLock { $0.refreshCalls } == 0)
        }
    }

    /// RFC 6749 §10.4 (refresh tokens are shared only between the authorization server and the
    /// client) and §10.3: a token endpoint that answers 307 or 308 to another origin would have
    /// the refresh token's form sent there. The redirect is refused, the other origin sees
    /// nothing, and the refresh fails typed; a redirect within the token endpoint's origin is
    /// still followed.
    @Test(arguments: TransportKind.allCases, [307, 308])
    func aTokenEndpointRedirectToAnotherOriginIsNotFollowed(_ kind: TransportKind, _ status: Int) async throws {
        let oauth = OAuthServer()
        let elsewhere = try await http1Server { _ in .json(#"{"access_token":"stolen","token_type":"Bearer"}"#) }
        let api = try await http1Server { request in
            switch request.path {
            case "/moved/token": return ScriptedResponse(status: status, headers: [("Location", "/oauth/token")], body: Data())
            case "/away/token":
                return ScriptedResponse(
                    status: status, headers: [("Location", elsewhere.baseURL.absoluteString + "/oauth/token")], body: Data())
            default: return await oauth.respond(request)
            }
        }
        let (transport, shutdown) = makeTransport(kind)
        let tokenClient = Client(configuration: .init(transport: transport))
        func client(tokenPath: String) -> Client {
            let auth = OAuth2Authenticator(
                tokenEndpoint: OAuth2TokenEndpoint(url: api.baseURL.appendingPathComponent(tokenPath), clientID: "courier-tests"),
                tokenClient: tokenClient, store: InMemoryCredentialStore(Self.expired))
            return Client(configuration: .init(transport: transport, baseURL: api.baseURL) { $0.middleware = [auth] })
        }
        let failure = await expectCourierError {
            _ = try await client(tokenPath: "away/token").send(Endpoint<Article>(path: "/api/1"))
        }
        #expect(failure?.kind == .redirect)
        #expect(api.requests.contains { $0.path == "/away/token" })
        #expect(elsewhere.requests.isEmpty)

        let article = try await client(tokenPath: "moved/token").send(Endpoint<Article>(path: "/api/1"))
        #expect(article.title == "t-1")
        #expect(api.requests.filter { $0.path == "/oauth/token" }.count == 1)
        #expect(elsewhere.requests.isEmpty)
        try await shutdown()
        try await api.stop()
        try await elsewhere.stop()
    }

    /// RFC 6749 §5.1: a token lasts `expires_in`. Inside its refresh margin, a token without a
    /// refresh token (and no client-credentials grant to renew it) is used until it expires, with
    /// no refresh and no sign-out; one whose early refresh fails on the way (a 503) is still used,
    /// and the credentials are kept. A refresh asked for by a 401 is not early: its failure fails
    /// the request (`refreshesThatFailOnTheWayDoNotUseUpTheRefreshLimit`).
    @Test(arguments: TransportKind.allCases)
    func aTokenInsideItsRefreshMarginIsUsedWhileItCannotBeRenewed(_ kind: TransportKind) async throws {
        let events = Locked(0)
        // Tokens ten minutes from expiry, inside a fifteen-minute margin (half of a lifetime that
        // began an hour ago is more): still good however slowly the machine runs the test.
        var inMargin = OAuth2Authenticator.Configuration()
        inMargin.refreshMargin = .seconds(900)
        let unrenewable = OAuth2Token(accessToken: "t-0", expiresAt: Date().addingTimeInterval(600))
        try await self.setUp(kind, token: unrenewable, configuration: inMargin, events: events) { client, auth, oauth, server in
            auth.tokenReceived(ago: 3600)
            let article = try await client.send(Endpoint<Article>(path: "/api/1"))
            #expect(article.title == "t-0")
            #expect(server.requests.filter { $0.path == "/oauth/token" }.isEmpty)
            #expect(auth.token?.accessToken == "t-0")
        }
        let renewable = OAuth2Token(accessToken: "t-0", refreshToken: "r-0", expiresAt: Date().addingTimeInterval(600))
        try await self.setUp(kind, token: renewable, configuration: inMargin, events: events) { client, auth, oauth, _ in
            auth.tokenReceived(ago: 3600)
            oauth.state.withLock { $0.refreshAnswer = .text("busy", status: 503) }
            let article = try await client.send(Endpoint<Article>(path: "/api/2"))
            #expect(article.title == "t-0")
            #expect(oauth.state.withLock { $0.refreshCalls } == 1)
            #expect(auth.token?.refreshToken == "r-0")
            // Once the endpoint answers, the next request refreshes early and uses the new token.
            oauth.state.withLock { $0.refreshAnswer = nil }
            let renewed = try await client.send(Endpoint<Article>(path: "/api/3"))
            #expect(renewed.title == "t-1")
        }
        // Refreshes that failed for a reason counted against the limit (an error page) used it
        // up: the token, still good, is used without asking again, not failed as "stopped".
        var configuration = inMargin
        configuration.maxRefreshes = 1
        try await self.setUp(kind, token: renewable, configuration: configuration, events: events) { client, auth, oauth, _ in
            auth.tokenReceived(ago: 3600)
            oauth.state.withLock {
                $0.refreshAnswer = .text("<html>Bad Request</html>", status: 400, headers: [("Content-Type", "text/html")])
            }
            for index in 1...3 {
                let article = try await client.send(Endpoint<Article>(path: "/api/\(index)"))
                #expect(article.title == "t-0")
            }
            #expect(oauth.state.withLock { $0.refreshCalls } == 1)
            #expect(auth.token?.accessToken == "t-0")
        }
        #expect(events.current == 0)
    }

    /// RFC 6749 Appendix A.12 and A.17: tokens are 1*VSCHAR. An empty refresh token in a refresh
    /// answer is none, so the one held is kept (§6: a new one replaces it only when issued); it
    /// used to replace it, and every later refresh sent `refresh_token=` and failed. An empty
    /// access token, or one with a line break or DEL, is refused as a decoding error.
    @Test(arguments: TransportKind.allCases)
    func anEmptyRefreshTokenInAnAnswerKeepsTheOneHeld(_ kind: TransportKind) async throws {
        try await self.setUp(kind, token: Self.expired) { client, auth, oauth, _ in
            oauth.state.withLock {
                $0.refreshAnswer = .json(#"{"access_token":"t-0","token_type":"Bearer","expires_in":3600,"refresh_token":""}"#)
            }
            let article = try await client.send(Endpoint<Article>(path: "/api/1"))
            #expect(article.title == "t-0")
            #expect(oauth.state.withLock { $0.refreshCalls } == 1)
            #expect(auth.token?.refreshToken == "r-0")
        }
        for token in ["", #"a\r\nX-Injected: 1"#, #"t\u007F"#] {
            do {
                _ = try OAuth2TokenEndpoint.decodeToken(Data(#"{"access_token":"\#(token)","refresh_token":""}"#.utf8))
                Issue.record("an access token \(token.debugDescription) was accepted")
            } catch let error as CourierError {
                #expect(error.kind == .decoding)
            }
        }
        #expect(try OAuth2TokenEndpoint.decodeToken(Data(#"{"access_token":"a b","refresh_token":""}"#.utf8)).refreshToken == nil)
    }
}

/// A credential store that loads, saves tokens, and fails to delete them, as a locked keychain may.
final class UndeletableStore: CredentialStore {
    struct Locked: Error {}
    private let token: Courier.Locked<OAuth2Token?>
    init(_ token: OAuth2Token?) { self.token = Courier.Locked(token) }
    func load() throws -> OAuth2Token? { self.token.current }
    func save(_ token: OAuth2Token?) throws {
        guard let token else { throw Locked() }
        self.token.withLock { $0 = token }
    }
}
