import Courier
import CourierAsyncHTTPClient
import CourierTestServer
import Foundation
import Testing

// The field names are the interop server's JSON keys.
// swift-format-ignore: AlwaysUseLowerCamelCase
struct AuthlibStats: Decodable, Sendable {
    var refresh: Int
    var password: Int
    var client_credentials: Int
    var authorization_code: Int
    var revoked: Int
}

/// Interop with an OAuth 2.0 token endpoint built on Authlib (PyPI), with 20-second tokens refreshed 10 seconds before they expire
/// (the margin leaves a loaded machine time to finish the requests that follow a refresh).
@Suite("Interop: Authlib OAuth 2.0 token endpoint", .enabled(if: ExternalServer.enabled(module: "authlib")))
struct AuthlibInteropTests {
    func withAuthlib(_ kind: TransportKind, _ body: (Client, OAuth2Authenticator, Client, Locked<Int>) async throws -> Void) async throws {
        try await withInteropServer(kind, script: "scripts/oauth2_interop_server.py", environment: ["EXPIRES_IN": "20"]) {
            server, transport in
            let plain = Client(configuration: .init(transport: transport, baseURL: server.baseURL))
            var configuration = OAuth2Authenticator.Configuration()
            configuration.refreshMargin = .seconds(10)
            let events = Locked(0)
            let auth = OAuth2Authenticator(
                tokenEndpoint: OAuth2TokenEndpoint(
                    url: server.baseURL.appendingPathComponent("oauth/token"), clientID: "courier", clientSecret: "courier-secret"),
                tokenClient: plain, configuration: configuration
            ) { _ in events.withLock { $0 += 1 } }
            let api = Client(configuration: .init(transport: transport, baseURL: server.baseURL) { $0.middleware = [auth] })
            try await body(api, auth, plain, events)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func passwordGrantThenOneRefreshForManyRequestsAfterExpiry(_ kind: TransportKind) async throws {
        try await self.withAuthlib(kind) { api, auth, plain, _ in
            try await auth.signIn(username: "ada", password: "lovelace")
            let first = try await api.send(Endpoint<Article>(path: "/api/me").deduplication(.disabled))
            #expect(first.title == "hello from authlib")
            // Counted from here: a machine that stalls between the sign-in and the first request
            // may refresh there already, which is right too.
            let before = try await plain.send(Endpoint<AuthlibStats>(path: "/stats"))
            try await Task.sleep(for: .milliseconds(10_100))
            try await withThrowingTaskGroup(of: Article.self) { group in
                for _ in 0..<20 { group.addTask { try await api.send(Endpoint<Article>(path: "/api/me").deduplication(.disabled)) } }
                var successes = 0
                for try await _ in group { successes += 1 }
                #expect(successes == 20)
            }
            let stats = try await plain.send(Endpoint<AuthlibStats>(path: "/stats"))
            #expect(stats.password == 1)
            // One refresh for the twenty requests after the token's margin began.
            #expect(stats.refresh - before.refresh == 1)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aRejectedTokenIsRefreshedAfterTheLowerCaseBearerChallenge(_ kind: TransportKind) async throws {
        try await self.withAuthlib(kind) { api, auth, plain, _ in
            try await auth.signIn(username: "ada", password: "lovelace")
            let good = try #require(auth.token)
            try auth.supply(
                OAuth2Token(accessToken: "not-a-real-token", refreshToken: good.refreshToken, expiresAt: Date().addingTimeInterval(3600)))
            let article = try await api.send(Endpoint<Article>(path: "/api/me"))
            #expect(article.id == 1)
            let stats = try await plain.send(Endpoint<AuthlibStats>(path: "/stats"))
            #expect(stats.refresh == 1)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func revokedRefreshTokenEndsInOneEventAndTypedErrors(_ kind: TransportKind) async throws {
        try await self.withAuthlib(kind) { api, auth, plain, events in
            try await auth.signIn(username: "ada", password: "lovelace")
            try await plain.send(Endpoint<Void>(method: .post, path: "/revoke-all-refresh", decoding: .none))
            try await Task.sleep(for: .milliseconds(10_100))
            var kinds: [CourierError.Kind] = []
            for _ in 0..<5 {
                do {
                    _ = try await api.send(Endpoint<Article>(path: "/api/me"))
                } catch let error as CourierError {
                    kinds.append(error.kind)
                }
            }
            #expect(kinds == Array(repeating: .authenticationRequired, count: 5))
            #expect(events.current == 1)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func clientCredentialsGrantRunsAgainWhenItsTokenExpires(_ kind: TransportKind) async throws {
        try await self.withAuthlib(kind) { api, auth, plain, _ in
            try await auth.authenticateClient()
            let first = try #require(auth.token)
            #expect(try await api.send(Endpoint<Article>(path: "/api/me")).id == 1)
            try await Task.sleep(for: .milliseconds(10_100))
            #expect(try await api.send(Endpoint<Article>(path: "/api/me")).id == 1)
            #expect(auth.token?.accessToken != first.accessToken)
            let stats = try await plain.send(Endpoint<AuthlibStats>(path: "/stats"))
            #expect(stats.password == 0)
            #expect(auth.token?.refreshToken == nil)
            #expect(auth.token?.expiresAt != nil)
        }
    }

    /// Follows the authorization URL as a browser would, without following the final redirect to
    /// the app's custom scheme: returns that callback URL.
    static func authorize(_ request: OAuth2AuthorizationRequest, through plain: Client) async throws -> URL {
        let browser = Client(
            configuration: .init(transport: plain.configuration.transport, baseURL: plain.configuration.baseURL) { $0.redirects = .none })
        let answer = try await browser.response(
            Endpoint<String>(path: request.url.absoluteString, acceptedStatuses: 300..<400, decoding: .string))
        return try #require(answer.headers[.location].flatMap(URL.init(string:)))
    }

    @Test(arguments: TransportKind.allCases, [("courier", "courier-secret"), ("courier-app", nil)] as [(String, String?)])
    func authorizationCodeWithPKCESignsInAndAForgedCallbackNeverReachesTheTokenEndpoint(
        _ kind: TransportKind, _ client: (id: String, secret: String?)
    ) async throws {
        let (clientID, secret) = client
        // RFC 6749 §4.1 with RFC 7636 S256, for a confidential client (Basic) and a public one
        // (client_id in the form, no secret).
        try await withInteropServer(kind, script: "scripts/oauth2_interop_server.py", environment: ["EXPIRES_IN": "600"]) {
            server, transport in
            let plain = Client(configuration: .init(transport: transport, baseURL: server.baseURL))
            let auth = OAuth2Authenticator(
                tokenEndpoint: OAuth2TokenEndpoint(
                    url: server.baseURL.appendingPathComponent("oauth/token"), clientID: clientID, clientSecret: secret),
                tokenClient: plain
            )
            let api = Client(configuration: .init(transport: transport, baseURL: server.baseURL) { $0.middleware = [auth] })
            let request = try OAuth2AuthorizationRequest(
                authorizationEndpoint: server.baseURL.appendingPathComponent("oauth/authorize"), clientID: clientID,
                redirectURI: "courier://callback", scope: "profile"
            )
            #expect(request.codeVerifier.count == 43)
            let callback = try await Self.authorize(request, through: plain)
            #expect(callback.absoluteString.hasPrefix("courier://callback?"))

            // A callback with another state (forged, or from an older request) is refused locally.
            var forged = try #require(URLComponents(url: callback, resolvingAgainstBaseURL: false))
            forged.queryItems = forged.queryItems?.map { $0.name == "state" ? URLQueryItem(name: "state", value: "attacker") : $0 }
            let refused = await expectCourierError { try await auth.signIn(with: request, callback: forged.url!) }
            #expect(refused?.kind == .authenticationRequired)
            let denied = await expectCourierError {
                try await auth.signIn(
                    with: request, callback: URL(string: "courier://callback?error=access_denied&state=\(request.state)")!)
            }
            #expect(denied?.code == "access_denied")
            #expect(try await plain.send(Endpoint<AuthlibStats>(path: "/stats")).authorization_code == 0)

            try await auth.signIn(with: request, callback: callback)
            #expect(try await api.send(Endpoint<Article>(path: "/api/me")).title == "hello from authlib")
            #expect(try await plain.send(Endpoint<AuthlibStats>(path: "/stats")).authorization_code == 1)
            // A code is good once (RFC 6749 §4.1.2).
            let reused = await expectCourierError { try await auth.signIn(with: request, callback: callback) }
            #expect(reused?.kind == .httpStatus)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aCodeExchangedWithoutItsOwnVerifierIsRefusedByTheServer(_ kind: TransportKind) async throws {
        // RFC 7636 §4.6: the server compares the verifier with the challenge it was given.
        try await withInteropServer(kind, script: "scripts/oauth2_interop_server.py", environment: ["EXPIRES_IN": "600"]) {
            server, transport in
            let plain = Client(configuration: .init(transport: transport, baseURL: server.baseURL))
            let endpoint = OAuth2TokenEndpoint(url: server.baseURL.appendingPathComponent("oauth/token"), clientID: "courier-app")
            let auth = OAuth2Authenticator(tokenEndpoint: endpoint, tokenClient: plain)
            let authorize = server.baseURL.appendingPathComponent("oauth/authorize")
            let request = try OAuth2AuthorizationRequest(
                authorizationEndpoint: authorize, clientID: "courier-app", redirectURI: "courier://callback")
            let callback = try await Self.authorize(request, through: plain)
            let impostor = try OAuth2AuthorizationRequest(
                authorizationEndpoint: authorize, clientID: "courier-app", redirectURI: "courier://callback", scope: nil,
                state: request.state, codeVerifier: String(repeating: "x", count: 43)
            )
            let error = await expectCourierError { try await auth.signIn(with: impostor, callback: callback) }
            #expect(error?.status?.code == 400)
            #expect(auth.token == nil)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func signingOutRevokesBothTokensAtTheServer(_ kind: TransportKind) async throws {
        // RFC 7009: the refresh token, then the access token are sent for revocation; afterwards the
        // old access token is refused.
        try await withInteropServer(kind, script: "scripts/oauth2_interop_server.py", environment: ["EXPIRES_IN": "600"]) {
            server, transport in
            let plain = Client(configuration: .init(transport: transport, baseURL: server.baseURL))
            let endpoint = OAuth2TokenEndpoint(
                url: server.baseURL.appendingPathComponent("oauth/token"), clientID: "courier", clientSecret: "courier-secret",
                revocationURL: server.baseURL.appendingPathComponent("oauth/revoke")
            )
            let auth = OAuth2Authenticator(tokenEndpoint: endpoint, tokenClient: plain)
            try await auth.signIn(username: "ada", password: "lovelace")
            let old = try #require(auth.token)
            #expect(try await auth.signOut(revokingTokens: true))
            #expect(auth.token == nil)
            // Revoking the refresh token ended the whole grant (RFC 7009 §2.1 lets a server do that),
            // so the access token's revocation found nothing left to revoke: one revocation.
            #expect(try await plain.send(Endpoint<AuthlibStats>(path: "/stats")).revoked == 1)
            let stale = Endpoint<String>(path: "/api/me", headers: [.authorization: "Bearer \(old.accessToken)"], decoding: .string)
            let refused = await expectCourierError { _ = try await plain.send(stale) }
            #expect(refused?.status?.code == 401)
            // Without a revocation endpoint the sign-out is local and says so.
            let local = OAuth2Authenticator(
                tokenEndpoint: OAuth2TokenEndpoint(url: endpoint.url, clientID: "courier", clientSecret: "courier-secret"),
                tokenClient: plain)
            try await local.signIn(username: "ada", password: "lovelace")
            #expect(try await local.signOut(revokingTokens: true) == false)
            #expect(local.token == nil)
        }
    }
}
