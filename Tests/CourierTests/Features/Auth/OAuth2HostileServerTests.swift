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
    }

    /// RFC 6749 §5.2: only some error codes say the grant cannot succeed. A refresh answered
    /// with a proxy's HTML 400 or 401, or with `invalid_scope`, fails the request typed but keeps
    /// the credentials: no sign-out event, and the next request refreshes with the same refresh
    /// token once the endpoint answers again. `invalid_client` signs out.
    @Test(arguments: TransportKind.allCases, ["html 400", "html 401", "invalid_scope", "invalid_client"])
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
            if answer == "invalid_client" {
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
}
