import Foundation
import HTTPTypes

/// Middleware that authenticates requests with OAuth 2.0 bearer tokens and keeps them fresh.
///
/// - Before a request leaves, the current access token goes in `Authorization: Bearer …`; a token
///   that expires within the refresh margin is refreshed first. The margin is
///   ``Configuration/refreshMargin``, but at most half the token's lifetime (from when the
///   authenticator received it — by a refresh, a sign-in, ``supply(_:)``, or from the store at
///   creation — to its expiry): a 20-second token with the 30-second default margin is
///   refreshed 10 seconds before it expires, not on every request. The requests that waited for
///   a refresh use the token it brought, whatever its lifetime. Such an early refresh holds up
///   only the request that started it, and that one for at most 5 seconds (at most half its time
///   left, and not past the token's expiry), then it goes with the current token if that has not
///   expired meanwhile (else it waits for the refresh like any request whose token expired);
///   requests arriving while it runs go with the current token at once (a slow or stalled token
///   endpoint holds no request whose token still works). Until it expires, the current
///   token is still used when it cannot be renewed (no refresh token and no client-credentials
///   grant), when such an early refresh fails for any reason but a refused grant (which signs
///   out), and when failed refreshes have used up ``Configuration/maxRefreshes``.
/// - On a 401, it checks whether the request was sent with the current token. If not (another
///   request refreshed meanwhile), it retries with the current token, without a new refresh.
///   If so, it refreshes and retries once. A one-shot body is not retried: the 401 is returned.
///   A 401 from another origin than the request's (after a redirect) says nothing about this
///   token: it is returned as is.
/// - Only one refresh is ever in flight; requests arriving meanwhile that need it (their token
///   expired, or a 401 refused it) wait for it and all resume with the new token. At most
///   ``Configuration/maxRefreshes`` refreshes per ``Configuration/refreshWindow`` stop a refresh
///   loop (a refresh that failed on the way, with the endpoint down, does not count, and neither
///   does an early one that succeeded before the token it replaced expired and that no request
///   needing it joined: short-lived tokens renewed on time, six a minute for 20-second tokens,
///   are no loop).
/// - When the refresh fails (`invalid_grant`, or no refresh token), `onAuthenticationRequired` is
///   called once, and waiting requests fail with kind `authenticationRequired` (presented as
///   re-login) — or, with ``Configuration/holdWhenSignedOut``, wait until ``supply(_:)`` or
///   ``signIn(username:password:scope:)`` provides new credentials, then continue.
/// - Every wait (for a refresh, or for new credentials) ends as soon as the request's task is
///   cancelled, with kind `cancelled`, or its ``Request/deadline`` passes, with kind `timeout`.
/// - New credentials win over a refresh in flight: a refresh that completes (or fails) after
///   ``supply(_:)``, ``signIn(username:password:scope:)`` or ``signOut()`` changes neither the
///   token nor the store, and the requests that waited for it continue with the new state.
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
        /// How long before expiry a token is refreshed; at most half the token's lifetime is used.
        public var refreshMargin: Duration = .seconds(30)
        /// The most refreshes within ``refreshWindow``.
        public var maxRefreshes: Int = 3
        /// The window for ``maxRefreshes``.
        public var refreshWindow: Duration = .seconds(60)
        /// Whether requests wait for new credentials after a failed refresh instead of failing.
        public var holdWhenSignedOut: Bool = false
        /// The origins the token is for: the scheme, host and port of each URL (its path is
        /// ignored). A request to any other origin — a presigned download URL an API handed out,
        /// a third party's API — goes through this middleware untouched, without the token and
        /// without waiting for one. `nil` (the default): the origin of the client's base URL (or
        /// of the endpoint's service), where the client's own default credential fields go too;
        /// an endpoint with an absolute URL to another origin goes without the token, and a client
        /// without a base URL sends it to every origin it reaches over https (or to this machine's
        /// loopback). Where a request goes is decided when it is built from its endpoint, so a
        /// middleware that moves a request to another origin before this one decides for it. Set
        /// it when the token is for more origins than that, or fewer, so it never reaches a party
        /// it was not meant for (RFC 6750 §5.3).
        public var audience: [URL]?

        /// Creates the default configuration.
        public init() {}
    }

    /// How a refresh ended, as its waiters see it.
    private enum RefreshOutcome: Sendable {
        /// The refresh brought this token.
        case refreshed(OAuth2Token)
        /// The credentials changed while it ran: decide again from the current state.
        case superseded
        /// The refresh failed.
        case failed(CourierError)
    }

    private struct State {
        var token: OAuth2Token?
        /// When the current token was received, the start of its lifetime.
        var receivedAt = Date()
        var refresh: SharedOutcome<RefreshOutcome>?
        /// Whether ``refresh`` is early: asked for by no 401, for a token that had not expired.
        var refreshIsEarly = false
        var refreshTimes: [ContinuousClock.Instant] = []
        var signedOut = false
        var eventRaised = false
        /// What requests held while signed out wait for: the next supplied token.
        var signedIn: SharedOutcome<OAuth2Token>?
        /// Incremented whenever credentials are supplied or removed: a refresh started in an
        /// older generation must not change the credentials.
        var generation: UInt64 = 0
        var refreshCount = 0
        var runningRefreshes = 0
        var usesClientCredentials = false
        var scope: String?
        /// Whether the current token came from a refresh the store failed to save (a locked
        /// keychain, say): it is saved again before a request uses it, until a save succeeds.
        var unsaved = false
    }

    private let tokenEndpoint: OAuth2TokenEndpoint
    private let tokenClient: Client
    private let store: any CredentialStore
    private let configuration: Configuration
    /// ``Configuration/audience`` as origins; `nil` for every origin.
    private let audience: Set<Authority>?
    private let onAuthenticationRequired: @Sendable (CourierError) -> Void
    private let state: Locked<State>
    /// Serializes changes of the credentials with their writes to the store, so the store always
    /// ends up with the latest credentials. Taken before `state`, never inside it.
    private let persisting = NSLock()

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
        self.audience = configuration.audience.map { Set($0.compactMap(Authority.init)) }
        self.onAuthenticationRequired = onAuthenticationRequired
        self.state = Locked(State(token: try? store.load()))
    }

    /// How many refreshes have been performed (for tests and metrics).
    public var refreshCount: Int { self.state.withLock { $0.refreshCount } }

    /// How many refreshes are still running, including ones whose result no longer counts
    /// because credentials changed meanwhile (for tests).
    package var runningRefreshes: Int { self.state.withLock { $0.runningRefreshes } }

    /// `token` when it is still the current token, not expired, and the user has not signed out.
    private func stillCurrent(_ token: OAuth2Token) -> OAuth2Token? {
        self.state.withLock { state in
            guard !state.signedOut, let current = state.token, current.accessToken == token.accessToken,
                !current.expires(within: .zero)
            else { return nil }
            return current
        }
    }

    /// Sets when the current token was received to `interval` ago (for tests: a token that has
    /// lived most of its lifetime, and so is inside its refresh margin, without waiting for it).
    package func tokenReceived(ago interval: TimeInterval) {
        self.state.withLock { $0.receivedAt = Date().addingTimeInterval(-interval) }
    }

    /// How many requests are held waiting for a sign-in (for tests).
    var heldCount: Int { self.state.withLock { $0.signedIn }?.waitingCount ?? 0 }

    /// The current token set.
    public var token: OAuth2Token? { self.state.withLock { $0.token } }

    /// Signs in with the password grant and resumes held requests.
    public func signIn(username: String, password: String, scope: String? = nil) async throws {
        let token = try await self.requestToken(.password(username: username, password: password, scope: scope))
        try self.supply(token)
    }

    /// Signs in with the code an authorization callback carries (authorization-code grant with
    /// PKCE), after checking the callback's `state`, and resumes held requests.
    ///
    /// - Throws: kind `authenticationRequired` for a callback that does not belong to `request`
    ///   or that carries an error (nothing is sent then); the token endpoint's errors otherwise.
    public func signIn(with request: OAuth2AuthorizationRequest, callback: URL) async throws {
        let code = try request.authorizationCode(from: callback)
        let token = try await self.requestToken(
            .authorizationCode(code: code, redirectURI: request.redirectURI, codeVerifier: request.codeVerifier))
        try self.supply(token)
    }

    /// Authenticates the client itself (client-credentials grant) and resumes held requests.
    ///
    /// Client-credentials tokens carry no refresh token: when one expires, the grant runs again.
    public func authenticateClient(scope: String? = nil) async throws {
        let token = try await self.requestToken(.clientCredentials(scope: scope))
        try self.supply(token, clientCredentialsScope: .some(scope))
    }

    /// Installs new credentials (saved to the store) and resumes held requests with them.
    ///
    /// A refresh in flight no longer counts: its result is dropped, and the requests waiting for
    /// it continue with these credentials.
    public func supply(_ token: OAuth2Token) throws {
        try self.supply(token, clientCredentialsScope: nil)
    }

    /// Installs credentials; `clientCredentialsScope` is set for a client-credentials token.
    private func supply(_ token: OAuth2Token, clientCredentialsScope: String??) throws {
        let (superseded, held) = try self.persisting.withLock {
            try self.store.save(token)
            return self.state.withLock { state -> (SharedOutcome<RefreshOutcome>?, SharedOutcome<OAuth2Token>?) in
                state.token = token
                state.receivedAt = Date()
                state.generation += 1
                state.signedOut = false
                state.eventRaised = false
                state.refreshTimes.removeAll()
                state.usesClientCredentials = clientCredentialsScope != nil
                state.scope = clientCredentialsScope ?? nil
                state.unsaved = false
                defer {
                    state.refresh = nil
                    state.signedIn = nil
                }
                return (state.refresh, state.signedIn)
            }
        }
        superseded?.complete(.success(.superseded))
        held?.complete(.success(token))
    }

    /// Forgets the credentials; a refresh in flight no longer counts.
    ///
    /// The credentials are forgotten in memory even when the store fails to delete them (a
    /// locked keychain, say): no request sends the token after this call, and the store's error
    /// is thrown after.
    public func signOut() throws {
        var storeFailure: (any Error)?
        let superseded = self.persisting.withLock {
            let superseded = self.state.withLock { state -> SharedOutcome<RefreshOutcome>? in
                state.token = nil
                state.unsaved = false
                state.generation += 1
                defer { state.refresh = nil }
                return state.refresh
            }
            do { try self.store.save(nil) } catch { storeFailure = error }
            return superseded
        }
        superseded?.complete(.success(.superseded))
        if let storeFailure { throw storeFailure }
    }

    /// Signs out, and revokes the tokens at the server's revocation endpoint (RFC 7009) when the
    /// token endpoint names one: the refresh token first (revoking it ends the grant), then the
    /// access token.
    ///
    /// The local sign-out happens whatever the server answers; the tokens are revoked even when
    /// the store fails to delete them, and the store's error is thrown after.
    /// - Returns: whether the server confirmed every revocation (`false` without an endpoint).
    @discardableResult
    public func signOut(revokingTokens: Bool) async throws -> Bool {
        let token = self.token
        let storeFailure: (any Error)?
        do {
            try self.signOut()
            storeFailure = nil
        } catch {
            storeFailure = error
        }
        guard revokingTokens, let token else {
            if let storeFailure { throw storeFailure }
            return false
        }
        var targets: [(String, String)] = []
        if let refresh = token.refreshToken { targets.append((refresh, "refresh_token")) }
        targets.append((token.accessToken, "access_token"))
        var confirmed = true
        for (value, hint) in targets {
            guard let endpoint = self.tokenEndpoint.revocation(of: value, hint: hint),
                let request = try? self.tokenClient.makeRequest(for: endpoint), (try? Self.refuseCleartext(credentialsIn: request)) != nil
            else {
                confirmed = false
                break
            }
            do { _ = try await self.tokenClient.send(endpoint) } catch { confirmed = false }
        }
        if let storeFailure { throw storeFailure }
        return confirmed
    }

    /// Adds the bearer token, refreshing it when needed, and retries once after a 401.
    ///
    /// A request in clear text to a host other than this machine's loopback fails with kind
    /// `invalidRequest` before any token is read: a bearer token goes over TLS only (RFC 6750
    /// §5.3 MUST). Plain `http` to `localhost` or a loopback address stays allowed (RFC 8252 §7.3).
    /// A request outside ``Configuration/audience`` goes on as it is, without the token.
    public func intercept(_ request: Request, next: Next) async throws -> RawResponse {
        if let audience = self.audience {
            guard let target = Authority(scheme: request.head.scheme, authority: request.head.authority), audience.contains(target) else {
                return try await next(request)
            }
        } else if request.leavesHome {
            return try await next(request)
        }
        try Self.refuseCleartext(request)
        // A token that is still good is taken without the (large) async frame of the wait for one.
        let token: OAuth2Token
        if let usable = self.usableToken() {
            token = usable.token
            if usable.unsaved { self.saveAgain() }
        } else {
            token = try await self.validToken(replacing: nil, deadline: request.deadline)
            if self.state.withLock({ $0.unsaved }) { self.saveAgain() }
        }
        var authorized = request
        authorized.head.headerFields[.authorization] = "Bearer \(token.accessToken)"
        let response = try await next(authorized)
        guard response.status == .unauthorized, Self.isTokenProblem(response) else { return response }
        // A 401 from another origin, or from this one after a hop through another (which went
        // without the token, so the answer says nothing about it), is no reason to refresh.
        guard !response.leftOrigin, Self.isFromOrigin(of: authorized, response) else { return response }
        guard request.body?.isReplayable ?? true else { return response }
        await response.body.discard()
        let fresh = try await self.validToken(replacing: token.accessToken, deadline: request.deadline)
        authorized.head.headerFields[.authorization] = "Bearer \(fresh.accessToken)"
        return try await next(authorized)
    }

    /// Throws unless the request goes over TLS or to this machine's loopback.
    static func refuseCleartext(_ request: Request) throws {
        guard let target = Authority(scheme: request.head.scheme, authority: request.head.authority) else {
            throw CourierError.invalidRequest("the request's target cannot be read, so it gets no bearer token")
        }
        if target.scheme == "https" || target.scheme == "wss" || Self.isLoopback(target.host) { return }
        throw CourierError.invalidRequest(
            "a bearer token is sent over https only (RFC 6750 §5.3); refused to send it in clear text to \(target.host)")
    }

    /// `localhost` (and names under it, RFC 6761 §6.3), 127.0.0.0/8 and `::1`.
    static func isLoopback(_ host: String) -> Bool {
        if host == "localhost" || host.hasSuffix(".localhost") || host == "::1" { return true }
        let parts = host.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts[0] == "127"
            && parts.allSatisfy { part in
                !part.isEmpty && part.utf8.count <= 3 && part.utf8.allSatisfy { (0x30...0x39).contains($0) } && UInt8(part) != nil
            }
    }

    /// A 401 is about the token unless it challenges a scheme other than Bearer, or its Bearer
    /// challenge names an error a new token does not fix (RFC 6750 §3.1: `insufficient_scope`
    /// needs another grant, `invalid_request` another request; only `invalid_token`, or no
    /// error code, asks for a new token).
    static func isTokenProblem(_ response: RawResponse) -> Bool {
        let values = response.head.headerFields[values: .wwwAuthenticate]
        guard !values.isEmpty else { return true }
        let challenges = values.flatMap(AuthenticationChallenge.parse)
        return challenges.isEmpty
            || challenges.contains { challenge in
                guard challenge.scheme == "bearer" else { return false }
                let error = challenge.parameters["error"]?.lowercased()
                return error != "insufficient_scope" && error != "invalid_request"
            }
    }

    /// Whether the response came from the request's origin (scheme, host and port), and not
    /// from another one a redirect led to. A response without a URL was not redirected.
    static func isFromOrigin(of request: Request, _ response: RawResponse) -> Bool {
        guard let url = response.url else { return true }
        guard let origin = Authority(scheme: request.head.scheme, authority: request.head.authority) else { return false }
        return Authority(url) == origin
    }

    // MARK: - Token state

    private enum Step {
        case use(OAuth2Token)
        /// Waits for a refresh; `early` is the current token when the refresh is early (no 401 asked
        /// for it) and that token has not expired: a refresh that fails on the way then leaves it
        /// in use, as the server still takes it (RFC 6749 §5.1: it lasts `expires_in`).
        /// `bounded`: the request started that early refresh, and waits for it for a while only
        /// (``earlyWaitLimit(for:deadline:)``).
        case wait(SharedOutcome<RefreshOutcome>, early: OAuth2Token?, bounded: Bool)
        case hold(SharedOutcome<OAuth2Token>)
        case fail(CourierError)
    }

    /// The longest a request waits for the early refresh it started.
    static let earlyWaitLongest = Duration.seconds(5)

    /// How long a request waits for the early refresh it started: ``earlyWaitLongest``, at most
    /// half its time left before `deadline`, and not past `token`'s expiry. (A request that
    /// deduplication shares has no deadline of its own here: each caller's ends its own wait.)
    static func earlyWaitLimit(for token: OAuth2Token, deadline: ContinuousClock.Instant?) -> ContinuousClock.Instant {
        let now = ContinuousClock.now
        // The token expires within its refresh margin (it is in it), so this stays small; clamped
        // all the same, never trapping.
        let untilExpiry =
            UntrustedNumber.clamp(
                token.expiresAt?.timeIntervalSinceNow ?? TimeInterval(UntrustedNumber.deltaSecondsLimit),
                to: TimeInterval(UntrustedNumber.deltaSecondsLimit)) ?? 0
        var limit = min(now + .milliseconds(Int64(max(0, untilExpiry) * 1000)), now + Self.earlyWaitLongest)
        if let deadline, deadline - now < Deadline.longest { limit = min(limit, now + (deadline - now) / 2) }
        return limit
    }

    /// The margin for `token`: the configured one, at most half the token's lifetime.
    private func refreshMargin(for token: OAuth2Token, receivedAt: Date) -> Duration {
        guard let expiresAt = token.expiresAt else { return self.configuration.refreshMargin }
        // A token from a store or from `supply` may expire at any date (1e300 seconds from now,
        // or never): the half lifetime is limited before it becomes a duration, never trapping.
        let halfLifetime =
            UntrustedNumber.clamp(expiresAt.timeIntervalSince(receivedAt) / 2, to: TimeInterval(UntrustedNumber.deltaSecondsLimit)) ?? 0
        return min(self.configuration.refreshMargin, .milliseconds(Int64(halfLifetime * 1000)))
    }

    /// The current token when it is good beyond the refresh margin, and whether the store still
    /// lacks it; `nil` when the caller must go through ``validToken(replacing:deadline:)``
    /// (signed out, none yet, or about to expire).
    @inline(never)
    private func usableToken() -> (token: OAuth2Token, unsaved: Bool)? {
        self.state.withLock { state in
            guard !state.signedOut, let token = state.token,
                !token.expires(within: self.refreshMargin(for: token, receivedAt: state.receivedAt))
            else { return nil }
            return (token, state.unsaved)
        }
    }

    /// Saves the current token again after a refresh whose save failed: a server that rotates
    /// refresh tokens has revoked the one the store holds (RFC 6749 §6), so the app would have
    /// to sign in again at its next launch. The request goes on whether or not this save works,
    /// and does not wait for a change of the credentials or another request's save (it then
    /// leaves the save to them).
    private func saveAgain() {
        guard self.persisting.try() else { return }
        defer { self.persisting.unlock() }
        guard let token = self.state.withLock({ $0.unsaved ? $0.token : nil }) else { return }
        guard (try? self.store.save(token)) != nil else { return }
        self.state.withLock { state in
            if state.token == token { state.unsaved = false }
        }
    }

    /// The token to send. With `stale`, the caller got a 401 with that token: a different current
    /// token is returned as is; the same one is refreshed. Waits end at `deadline` or on
    /// cancellation.
    private func validToken(replacing stale: String?, deadline: ContinuousClock.Instant?) async throws -> OAuth2Token {
        var stale = stale
        while true {
            // A request that can no longer wait neither waits nor starts a refresh.
            let interruption = SharedOutcome<OAuth2Token>.interruption(deadline: deadline, waitingFor: "credentials")
            let step = self.state.withLock { state -> Step in
                guard !state.signedOut, let token = state.token else {
                    if self.configuration.holdWhenSignedOut {
                        if let interruption { return .fail(interruption) }
                        let signedIn = state.signedIn ?? SharedOutcome<OAuth2Token>()
                        state.signedIn = signedIn
                        return .hold(signedIn)
                    }
                    return .fail(Self.signedOutError())
                }
                if let stale, token.accessToken != stale { return .use(token) }
                if stale == nil, !token.expires(within: self.refreshMargin(for: token, receivedAt: state.receivedAt)) { return .use(token) }
                let unexpired = stale == nil && !token.expires(within: .zero)
                // Within the margin, a token that neither a refresh token nor a client-credentials
                // grant can renew is used until it expires: asking would sign out a user whose
                // token still works.
                if unexpired, token.refreshToken == nil, !state.usesClientCredentials { return .use(token) }
                if let interruption { return .fail(interruption) }
                if let refresh = state.refresh {
                    // An early refresh runs: a token that has not expired goes as it is (the
                    // server takes it, RFC 6749 §5.1) rather than wait on a token endpoint that
                    // may be slow or stalled. One that a 401 refused waits for the new token.
                    if unexpired, state.refreshIsEarly { return .use(token) }
                    // A request that needs it (its token expired, or refused) makes it no
                    // longer early: it counts against the limit.
                    if !unexpired { state.refreshIsEarly = false }
                    return .wait(refresh, early: unexpired ? token : nil, bounded: false)
                }
                let now = ContinuousClock.now
                state.refreshTimes.removeAll { now - $0 > self.configuration.refreshWindow }
                guard state.refreshTimes.count < self.configuration.maxRefreshes else {
                    // Refreshes that failed used up the limit: a token that still works is used.
                    if unexpired { return .use(token) }
                    return .fail(
                        CourierError(
                            .authenticationRequired,
                            "stopped after \(self.configuration.maxRefreshes) token refreshes in \(self.configuration.refreshWindow)"))
                }
                state.refreshTimes.append(now)
                state.refreshCount += 1
                state.runningRefreshes += 1
                let refresh = SharedOutcome<RefreshOutcome>()
                state.refresh = refresh
                state.refreshIsEarly = unexpired
                let refreshToken = token.refreshToken
                let generation = state.generation
                Task {
                    await self.performRefresh(refreshToken, generation: generation, started: now, outcome: refresh)
                    self.state.withLock { $0.runningRefreshes -= 1 }
                }
                return .wait(refresh, early: unexpired ? token : nil, bounded: unexpired)
            }
            switch step {
            case .use(let token):
                return token
            case .fail(let error):
                throw error
            case .wait(let refresh, let early, let bounded):
                let outcome: RefreshOutcome
                do {
                    // The request that started an early refresh waits for it for a while only
                    // (`earlyWaitLimit`); then the loop looks again: it goes with the token it
                    // has if that still works, else it waits for the refresh in full.
                    outcome = try await refresh.value(
                        deadline: bounded ? early.map { Self.earlyWaitLimit(for: $0, deadline: deadline) } ?? deadline : deadline,
                        waitingFor: "the token refresh")
                } catch let error as CourierError where bounded && error.kind == .timeout {
                    if let interruption = SharedOutcome<OAuth2Token>.interruption(deadline: deadline, waitingFor: "the token refresh") {
                        throw interruption
                    }
                    stale = nil
                    continue
                }
                switch outcome {
                case .refreshed(let token):
                    MonitorScope.authRefreshed()
                    return token
                case .superseded:
                    continue
                case .failed(let error):
                    // An early refresh that failed for any reason but a refused grant (which signed
                    // out): the token it was to replace still works. It is looked up again: when
                    // credentials were replaced or signed out, or the token expired during the
                    // wait, the state decides anew.
                    if let early, error.kind != .authenticationRequired {
                        if let token = self.stillCurrent(early) { return token }
                        stale = nil
                        continue
                    }
                    // Held requests wait for a sign-in after a refusal; a refresh that failed
                    // for any other reason (offline, a 5xx) fails them with its own error, as
                    // it fails the others: asking again at once would fail alike.
                    guard self.configuration.holdWhenSignedOut, error.kind == .authenticationRequired else { throw error }
                    stale = nil
                }
            case .hold(let signedIn):
                _ = try await signedIn.value(deadline: deadline, waitingFor: "signing in")
                stale = nil
            }
        }
    }

    /// Runs one refresh (started at `started`) and reports it to `outcome`; it changes the
    /// credentials only if they are still those of `generation`.
    private func performRefresh(
        _ refreshToken: String?, generation: UInt64, started: ContinuousClock.Instant, outcome: SharedOutcome<RefreshOutcome>
    ) async {
        do {
            var token: OAuth2Token
            if let refreshToken {
                token = try await self.requestToken(.refreshToken(refreshToken))
                // RFC 6749 §6: without a new refresh token the old one stays; §5.1: a response
                // without `scope` grants the scope asked for, which a refresh asks as before.
                if token.refreshToken == nil { token.refreshToken = refreshToken }
                if token.scope == nil { token.scope = self.state.withLock { $0.token?.scope } }
            } else if let scope = self.state.withLock({ $0.usesClientCredentials ? Optional($0.scope) : nil }) {
                token = try await self.requestToken(.clientCredentials(scope: scope))
            } else {
                throw CourierError(.authenticationRequired, "the access token expired and there is no refresh token")
            }
            let installed = self.persisting.withLock {
                let current = self.state.withLock { state -> Bool in
                    guard state.generation == generation else { return false }
                    // An early refresh that worked renewed a token on time: no loop, so it does
                    // not count against the limit, which a 401 may need later. Early still means
                    // no request that needed it joined, and the token it replaces has not expired
                    // meanwhile (a token endpoint slower than the tokens' lifetime is a loop).
                    if state.refreshIsEarly, state.token.map({ !$0.expires(within: .zero) }) == true,
                        let index = state.refreshTimes.firstIndex(of: started)
                    {
                        state.refreshTimes.remove(at: index)
                    }
                    state.token = token
                    state.receivedAt = Date()
                    state.refresh = nil
                    state.unsaved = false
                    return true
                }
                // Kept in memory either way (the server may have revoked the old refresh token);
                // one the store failed to take is saved again before the next request uses it.
                if current, (try? self.store.save(token)) == nil {
                    self.state.withLock { $0.unsaved = true }
                }
                return current
            }
            outcome.complete(.success(installed ? .refreshed(token) : .superseded))
        } catch {
            var failure = CourierError.wrap(error)
            // Only an answer that says the grant itself can never succeed signs out (RFC 6749
            // §5.2): an HTML error page of a proxy, `invalid_request` or `invalid_scope` keeps
            // the credentials, and a later request tries again.
            let refused = OAuth2TokenEndpoint.errorCode(of: failure).map(Self.signsOut.contains) ?? false
            if failure.kind == .authenticationRequired || refused {
                failure = CourierError(
                    .authenticationRequired,
                    "signing in again is required: the token refresh was refused (\(OAuth2TokenEndpoint.errorCode(of: failure) ?? failure.shortDescription))",
                    underlying: failure)
                failure.presentation = .reLogin
                let raise = self.persisting.withLock { () -> Bool? in
                    let raise = self.state.withLock { state -> Bool? in
                        guard state.generation == generation else { return nil }
                        state.refresh = nil
                        state.signedOut = true
                        state.token = nil
                        state.unsaved = false
                        defer { state.eventRaised = true }
                        return !state.eventRaised
                    }
                    if raise != nil { try? self.store.save(nil) }
                    return raise
                }
                guard let raise else {
                    outcome.complete(.success(.superseded))
                    return
                }
                if raise { self.onAuthenticationRequired(failure) }
            } else {
                // A network failure: keep the credentials, let a later request try again. One on
                // the way (the endpoint unreachable, a 5xx or 429) does not count against the
                // refresh limit: counted, a short outage would end in "sign in again". Other
                // answers (an error page, `invalid_scope`) still do, so a token endpoint that
                // answers so for ever is asked at most that often.
                let onTheWay = Self.failedOnTheWay(failure)
                let current = self.state.withLock { state -> Bool in
                    if onTheWay, let index = state.refreshTimes.firstIndex(of: started) { state.refreshTimes.remove(at: index) }
                    guard state.generation == generation else { return false }
                    state.refresh = nil
                    return true
                }
                guard current else {
                    outcome.complete(.success(.superseded))
                    return
                }
            }
            outcome.complete(.success(.failed(failure)))
        }
    }

    /// The token endpoint's error codes (RFC 6749 §5.2) after which the grant cannot succeed as
    /// it is: the refresh token is expired or revoked, or this client may not use it.
    static let signsOut: Set<String> = ["invalid_grant", "invalid_client", "unauthorized_client", "unsupported_grant_type"]

    /// Whether a refresh failed on the way to an answer about the grant: the endpoint could not
    /// be reached (a refused connection, a TLS failure or pin mismatch, a redirect refused, as a
    /// captive portal makes), timed out, was cancelled, or answered 5xx, 408 or 429.
    static func failedOnTheWay(_ failure: CourierError) -> Bool {
        switch failure.kind {
        case .transport, .timeout, .tls, .pinMismatch, .redirect, .cancelled: return true
        case .httpStatus: return failure.status.map { $0.code >= 500 || $0.code == 429 || $0.code == 408 } ?? false
        default: return false
        }
    }

    private func requestToken(_ grant: OAuth2TokenEndpoint.Grant) async throws -> OAuth2Token {
        let endpoint = self.tokenEndpoint.endpoint(for: grant)
        try Self.refuseCleartext(credentialsIn: self.tokenClient.makeRequest(for: endpoint))
        return try await self.tokenClient.send(endpoint)
    }

    /// Throws unless the request (its URL as the token client resolves it) goes over TLS or to
    /// this machine's loopback: a grant (a password, a refresh token, a code) and the client's
    /// secret go to the token endpoint over TLS only (RFC 6749 §3.2, §2.3.1), as a token to be
    /// revoked does (RFC 7009 §2).
    static func refuseCleartext(credentialsIn request: Request) throws {
        let target = Authority(scheme: request.head.scheme, authority: request.head.authority)
        if let target, target.scheme == "https" || Self.isLoopback(target.host) { return }
        throw CourierError.invalidRequest(
            "the token endpoint is reached over https only (RFC 6749 §3.2); refused to send credentials in clear text to \(target?.host ?? "a URL without a host")"
        )
    }

    private static func signedOutError() -> CourierError {
        var error = CourierError(.authenticationRequired, "signing in is required")
        error.presentation = .reLogin
        return error
    }
}
