import Foundation
import HTTPTypes

/// Middleware that authenticates requests with OAuth 2.0 bearer tokens and keeps them fresh.
///
/// - Before a request leaves, the current access token goes in `Authorization: Bearer …`; a token
///   that expires within ``Configuration/refreshMargin`` is refreshed first.
/// - On a 401, it checks whether the request was sent with the current token. If not (another
///   request refreshed meanwhile), it retries with the current token, without a new refresh.
///   If so, it refreshes and retries once. A one-shot body is not retried: the 401 is returned.
/// - Only one refresh is ever in flight; requests arriving meanwhile wait for it and all resume
///   with the new token. At most ``Configuration/maxRefreshes`` refreshes per
///   ``Configuration/refreshWindow`` stop a refresh loop.
/// - When the refresh fails (`invalid_grant`, or no refresh token), `onAuthenticationRequired` is
///   called once, and waiting requests fail with kind `authenticationRequired` (presented as
///   re-login) — or, with ``Configuration/holdWhenSignedOut``, wait until ``supply(_:)`` or
///   ``signIn(username:password:scope:)`` provides new credentials, then continue.
///
/// Token requests go through `tokenClient`, which must not itself use this middleware.
///
/// ```swift
/// let auth = OAuth2Authenticator(tokenEndpoint: .init(url: tokenURL, clientID: "app"),
///                                tokenClient: plainClient, store: FileCredentialStore(url: file)) { _ in
///     showSignIn()
/// }
/// let api = Client(configuration: .init(transport: transport, baseURL: apiURL) { $0.middleware = [auth] })
/// ```
public final class OAuth2Authenticator: Middleware {
    /// Refresh and failure behaviour.
    public struct Configuration: Sendable {
        /// How long before expiry a token is refreshed.
        public var refreshMargin: Duration = .seconds(30)
        /// The most refreshes within ``refreshWindow``.
        public var maxRefreshes: Int = 3
        /// The window for ``maxRefreshes``.
        public var refreshWindow: Duration = .seconds(60)
        /// Whether requests wait for new credentials after a failed refresh instead of failing.
        public var holdWhenSignedOut: Bool = false

        /// Creates the default configuration.
        public init() {}
    }

    private struct State {
        var token: OAuth2Token?
        var refresh: Task<OAuth2Token, any Error>?
        var refreshTimes: [ContinuousClock.Instant] = []
        var signedOut = false
        var eventRaised = false
        var held: [UInt64: CheckedContinuation<OAuth2Token, any Error>] = [:]
        var nextHeld: UInt64 = 0
        var refreshCount = 0
        var usesClientCredentials = false
        var scope: String?
    }

    private let tokenEndpoint: OAuth2TokenEndpoint
    private let tokenClient: Client
    private let store: any CredentialStore
    private let configuration: Configuration
    private let onAuthenticationRequired: @Sendable (CourierError) -> Void
    private let state: Locked<State>

    /// Creates the middleware; the token set is read from `store` once.
    public init(
        tokenEndpoint: OAuth2TokenEndpoint,
        tokenClient: Client,
        store: any CredentialStore = InMemoryCredentialStore(),
        configuration: Configuration = Configuration(),
        onAuthenticationRequired: @escaping @Sendable (CourierError) -> Void = { _ in }
    ) {
        self.tokenEndpoint = tokenEndpoint
        self.tokenClient = tokenClient
        self.store = store
        self.configuration = configuration
        self.onAuthenticationRequired = onAuthenticationRequired
        self.state = Locked(State(token: try? store.load()))
    }

    /// How many refreshes have been performed (for tests and metrics).
    public var refreshCount: Int { self.state.withLock { $0.refreshCount } }

    /// The current token set.
    public var token: OAuth2Token? { self.state.withLock { $0.token } }

    /// Signs in with the password grant and resumes held requests.
    public func signIn(username: String, password: String, scope: String? = nil) async throws {
        let token = try await self.requestToken(.password(username: username, password: password, scope: scope))
        try self.supply(token)
    }

    /// Authenticates the client itself (client-credentials grant) and resumes held requests.
    ///
    /// Client-credentials tokens carry no refresh token: when one expires, the grant runs again.
    public func authenticateClient(scope: String? = nil) async throws {
        let token = try await self.requestToken(.clientCredentials(scope: scope))
        try self.supply(token)
        self.state.withLock { state in
            state.usesClientCredentials = true
            state.scope = scope
        }
    }

    /// Installs new credentials (saved to the store) and resumes held requests with them.
    public func supply(_ token: OAuth2Token) throws {
        try self.store.save(token)
        let held = self.state.withLock { state -> [CheckedContinuation<OAuth2Token, any Error>] in
            state.token = token
            state.signedOut = false
            state.eventRaised = false
            state.refreshTimes.removeAll()
            state.usesClientCredentials = false
            defer { state.held.removeAll() }
            return Array(state.held.values)
        }
        for waiter in held { waiter.resume(returning: token) }
    }

    /// Forgets the credentials.
    public func signOut() throws {
        try self.store.save(nil)
        self.state.withLock { $0.token = nil }
    }

    /// Adds the bearer token, refreshing it when needed, and retries once after a 401.
    public func intercept(_ request: Request, next: Next) async throws -> RawResponse {
        let token = try await self.validToken(replacing: nil)
        var authorized = request
        authorized.head.headerFields[.authorization] = "Bearer \(token.accessToken)"
        let response = try await next(authorized)
        guard response.status == .unauthorized, Self.isTokenProblem(response) else { return response }
        guard request.body?.isReplayable ?? true else { return response }
        await response.body.discard()
        let fresh = try await self.validToken(replacing: token.accessToken)
        authorized.head.headerFields[.authorization] = "Bearer \(fresh.accessToken)"
        return try await next(authorized)
    }

    /// A 401 is about the token unless it challenges a scheme other than Bearer.
    static func isTokenProblem(_ response: RawResponse) -> Bool {
        let values = response.head.headerFields[values: .wwwAuthenticate]
        guard !values.isEmpty else { return true }
        let challenges = values.flatMap(AuthenticationChallenge.parse)
        return challenges.isEmpty || challenges.contains { $0.scheme == "bearer" }
    }

    // MARK: - Token state

    private enum Step {
        case use(OAuth2Token)
        case wait(Task<OAuth2Token, any Error>)
        case hold(UInt64)
        case fail(CourierError)
    }

    /// The token to send. With `stale`, the caller got a 401 with that token: a different current
    /// token is returned as is; the same one is refreshed.
    private func validToken(replacing stale: String?) async throws -> OAuth2Token {
        let step = self.state.withLock { state -> Step in
            if state.signedOut || state.token == nil {
                if self.configuration.holdWhenSignedOut {
                    state.nextHeld += 1
                    return .hold(state.nextHeld)
                }
                return .fail(Self.signedOutError())
            }
            let token = state.token!
            if let stale, token.accessToken != stale { return .use(token) }
            if stale == nil, !token.expires(within: self.configuration.refreshMargin) { return .use(token) }
            if let refresh = state.refresh { return .wait(refresh) }
            let now = ContinuousClock.now
            state.refreshTimes.removeAll { now - $0 > self.configuration.refreshWindow }
            guard state.refreshTimes.count < self.configuration.maxRefreshes else {
                return .fail(CourierError(.authenticationRequired, "stopped after \(self.configuration.maxRefreshes) token refreshes in \(self.configuration.refreshWindow)"))
            }
            state.refreshTimes.append(now)
            state.refreshCount += 1
            let refreshToken = token.refreshToken
            let task = Task { try await self.performRefresh(refreshToken) }
            state.refresh = task
            return .wait(task)
        }
        switch step {
        case .use(let token):
            return token
        case .fail(let error):
            throw error
        case .wait(let task):
            do {
                return try await task.value
            } catch {
                if self.configuration.holdWhenSignedOut { return try await self.validToken(replacing: nil) }
                throw CourierError.wrap(error)
            }
        case .hold(let id):
            return try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { continuation in
                    let ready: OAuth2Token? = self.state.withLock { state in
                        if !state.signedOut, let token = state.token { return token }
                        state.held[id] = continuation
                        return nil
                    }
                    if let ready { continuation.resume(returning: ready) }
                }
            } onCancel: {
                let waiter = self.state.withLock { $0.held.removeValue(forKey: id) }
                waiter?.resume(throwing: CourierError.cancelled())
            }
        }
    }

    private func performRefresh(_ refreshToken: String?) async throws -> OAuth2Token {
        do {
            var token: OAuth2Token
            if let refreshToken {
                token = try await self.requestToken(.refreshToken(refreshToken))
                if token.refreshToken == nil { token.refreshToken = refreshToken }
            } else if let scope = self.state.withLock({ $0.usesClientCredentials ? Optional($0.scope) : nil }) {
                token = try await self.requestToken(.clientCredentials(scope: scope))
            } else {
                throw CourierError(.authenticationRequired, "the access token expired and there is no refresh token")
            }
            try? self.store.save(token)
            self.state.withLock { state in
                state.token = token
                state.refresh = nil
            }
            return token
        } catch {
            var failure = CourierError.wrap(error)
            let invalidGrant = OAuth2TokenEndpoint.errorCode(of: failure) == "invalid_grant"
            if failure.kind == .authenticationRequired || invalidGrant || failure.status?.code == 400 || failure.status?.code == 401 {
                failure = CourierError(.authenticationRequired, "signing in again is required: the token refresh was refused (\(OAuth2TokenEndpoint.errorCode(of: failure) ?? failure.shortDescription))", underlying: failure)
                failure.presentation = .reLogin
                let raise = self.state.withLock { state -> Bool in
                    state.refresh = nil
                    state.signedOut = true
                    state.token = nil
                    defer { state.eventRaised = true }
                    return !state.eventRaised
                }
                try? self.store.save(nil)
                if raise { self.onAuthenticationRequired(failure) }
            } else {
                // A network failure: keep the credentials, let a later request try again.
                self.state.withLock { $0.refresh = nil }
            }
            throw failure
        }
    }

    private func requestToken(_ grant: OAuth2TokenEndpoint.Grant) async throws -> OAuth2Token {
        try await self.tokenClient.send(self.tokenEndpoint.endpoint(for: grant))
    }

    private static func signedOutError() -> CourierError {
        var error = CourierError(.authenticationRequired, "signing in is required")
        error.presentation = .reLogin
        return error
    }
}
