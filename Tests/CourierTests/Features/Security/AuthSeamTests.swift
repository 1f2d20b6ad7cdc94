import CourierAsyncHTTPClient
import CourierTestServer
import Crypto
import Foundation
import HTTPTypes
import Testing

@testable import Courier

/// A token endpoint and a protected resource whose token answers the test can hold back, and
/// whose tokens' lifetime it chooses.
final class SeamTokenServer: Sendable {
    struct State {
        var issued = 0
        var valid: Set<String> = []
        var refreshCalls = 0
        var passwordGrants = 0
        /// While set, refresh-grant answers wait (for at most a minute).
        var holdRefreshes = false
        var refreshFails = false
        var lifetime = 3600
    }

    let state = Locked(State())

    func respond(_ request: RecordedRequest) async -> ScriptedResponse {
        if request.path == "/oauth/token" {
            let form = String(decoding: request.body, as: UTF8.self)
            var fail = false
            if form.contains("grant_type=refresh_token") {
                fail = self.state.withLock { state -> Bool in
                    state.refreshCalls += 1
                    return state.refreshFails
                }
                let until = Date().addingTimeInterval(60)
                while self.state.withLock({ $0.holdRefreshes }), Date() < until {
                    try? await Task.sleep(for: .milliseconds(10))
                }
            } else if form.contains("grant_type=password") {
                self.state.withLock { $0.passwordGrants += 1 }
            }
            if fail { return .json(#"{"error":"invalid_grant"}"#, status: 400) }
            let (token, lifetime) = self.state.withLock { state -> (String, Int) in
                state.issued += 1
                let token = "t-\(state.issued)"
                state.valid.insert(token)
                return (token, state.lifetime)
            }
            return .json(#"{"access_token":"\#(token)","token_type":"Bearer","expires_in":\#(lifetime),"refresh_token":"r-\#(token)"}"#)
        }
        if request.path == "/to" {
            return ScriptedResponse(status: 302, headers: [("Location", request.query["url"] ?? "/api")])
        }
        let authorization = request.header("authorization") ?? ""
        let ok = self.state.withLock { $0.valid.contains(String(authorization.dropFirst("Bearer ".count))) }
        guard authorization.hasPrefix("Bearer "), ok else {
            return .text("no", status: 401, headers: [("WWW-Authenticate", #"Bearer realm="api", error="invalid_token""#)])
        }
        return .json(#"{"id":1,"title":"\#(authorization.dropFirst("Bearer ".count))"}"#)
    }
}

/// A credential store that keeps what was saved last, and counts saves.
final class RecordingCredentialStore: CredentialStore {
    let saved: Locked<(token: OAuth2Token?, saves: Int)>

    init(_ token: OAuth2Token?) { self.saved = Locked((token, 0)) }

    func load() throws -> OAuth2Token? { self.saved.current.token }

    func save(_ token: OAuth2Token?) throws {
        self.saved.withLock { $0 = (token, $0.saves + 1) }
    }
}

/// How a request started in the background ended.
final class Finish<Value: Sendable>: Sendable {
    private let result = Locked<Result<Value, CourierError>?>(nil)

    /// Runs `body` in a new task (cancelled before it starts when `preCancelled`).
    @discardableResult
    static func start(
        preCancelled: Bool = false, _ body: @escaping @Sendable () async throws -> Value
    ) -> (Finish<Value>, Task<Void, Never>) {
        let finish = Finish<Value>()
        let task = Task {
            if preCancelled { withUnsafeCurrentTask { $0?.cancel() } }
            do {
                let value = try await body()
                finish.result.withLock { $0 = .success(value) }
            } catch let error as CourierError {
                finish.result.withLock { $0 = .failure(error) }
            } catch {
                finish.result.withLock { $0 = .failure(CourierError(.transport, "not a CourierError: \(error)")) }
            }
        }
        return (finish, task)
    }

    var isDone: Bool { self.result.current != nil }
    var error: CourierError? {
        if case .failure(let error) = self.result.current { return error }
        return nil
    }
    var value: Value? {
        if case .success(let value) = self.result.current { return value }
        return nil
    }
}

@Suite("Auth seams: cancellable waits, superseded refreshes, short-lived tokens, gates, redirects, signed uploads")
struct AuthSeamTests {
    /// How long a test waits for something that must happen while a token answer or prerequisite
    /// is still held back; generous, so only a request that truly waits for it fails the test.
    /// Half of the 60 s for which the test servers hold an answer back at most.
    static let heldBack: Double = 30

    struct Setup: Sendable {
        var client: Client
        var auth: OAuth2Authenticator
        var tokens: SeamTokenServer
        var server: TestServer
        var store: RecordingCredentialStore
    }

    func withAuth(
        _ kind: TransportKind,
        token: OAuth2Token?,
        configuration: OAuth2Authenticator.Configuration = .init(),
        prepare: (SeamTokenServer) -> Void = { _ in },
        _ body: (Setup) async throws -> Void
    ) async throws {
        let tokens = SeamTokenServer()
        prepare(tokens)
        if let token { tokens.state.withLock { _ = $0.valid.insert(token.accessToken) } }
        let server = try await http1Server(tokens.respond)
        let (transport, shutdown) = makeTransport(kind)
        let store = RecordingCredentialStore(token)
        let auth = OAuth2Authenticator(
            tokenEndpoint: OAuth2TokenEndpoint(
                url: server.baseURL.appendingPathComponent("oauth/token"), clientID: "seams", clientSecret: "secret"),
            tokenClient: Client(configuration: .init(transport: transport)),
            store: store,
            configuration: configuration
        )
        let client = Client(
            configuration: .init(transport: transport, baseURL: server.baseURL) {
                $0.middleware = [auth]
            })
        let setup = Setup(client: client, auth: auth, tokens: tokens, server: server, store: store)
        do {
            try await body(setup)
        } catch {
            tokens.state.withLock { $0.holdRefreshes = false }
            try? await shutdown()
            try? await server.stop()
            throw error
        }
        tokens.state.withLock { $0.holdRefreshes = false }
        try await shutdown()
        try await server.stop()
    }

    static let expired = OAuth2Token(accessToken: "t-0", refreshToken: "r-0", expiresAt: Date().addingTimeInterval(-10))

    /// A GET that is not deduplicated, so it runs in the caller's own task.
    static func article(_ path: String, timeout: Duration? = nil) -> Endpoint<Article> {
        var endpoint = Endpoint<Article>(path: path, timeout: timeout)
        endpoint.deduplication = .disabled
        return endpoint
    }

    static var holding: OAuth2Authenticator.Configuration {
        var configuration = OAuth2Authenticator.Configuration()
        configuration.holdWhenSignedOut = true
        return configuration
    }

    // MARK: - 1. Waits end on cancellation and at the deadline

    @Test(arguments: TransportKind.allCases)
    func anAlreadyCancelledRequestHeldWhileSignedOutEndsAndFreesItsSlot(_ kind: TransportKind) async throws {
        try await self.withAuth(kind, token: nil, configuration: Self.holding) { setup in
            let (own, _) = Finish.start(preCancelled: true) { try await setup.client.send(Self.article("/api/own")) }
            let (shared, _) = Finish.start(preCancelled: true) { try await setup.client.send(Endpoint<Article>(path: "/api/shared")) }
            #expect(await eventually(seconds: Self.heldBack) { own.isDone && shared.isDone })
            #expect(own.error?.kind == .cancelled)
            #expect(shared.error?.kind == .cancelled)
            #expect(await eventually(seconds: Self.heldBack) { setup.client.traffic.inFlight == 0 })
            // Whatever is still held is let go, so the test ends either way.
            try setup.auth.supply(OAuth2Token(accessToken: "late", expiresAt: Date().addingTimeInterval(3600)))
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aRequestHeldWhileSignedOutEndsWhenCancelled(_ kind: TransportKind) async throws {
        try await self.withAuth(kind, token: nil, configuration: Self.holding) { setup in
            let (finish, task) = Finish.start { try await setup.client.send(Self.article("/api/held")) }
            // Held, waiting for a sign-in.
            #expect(await eventually { setup.auth.heldCount == 1 })
            task.cancel()
            #expect(await eventually(seconds: Self.heldBack) { finish.isDone })
            #expect(finish.error?.kind == .cancelled)
            #expect(await eventually(seconds: Self.heldBack) { setup.client.traffic.inFlight == 0 })
            #expect(setup.auth.heldCount == 0)
            try setup.auth.supply(OAuth2Token(accessToken: "late", expiresAt: Date().addingTimeInterval(3600)))
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aRequestHeldWhileSignedOutEndsAtItsDeadline(_ kind: TransportKind) async throws {
        try await self.withAuth(kind, token: nil, configuration: Self.holding) { setup in
            let (finish, _) = Finish.start { try await setup.client.send(Self.article("/api/held", timeout: .milliseconds(300))) }
            #expect(await eventually(seconds: Self.heldBack) { finish.isDone })
            #expect(finish.error?.kind == .timeout)
            try setup.auth.supply(OAuth2Token(accessToken: "late", expiresAt: Date().addingTimeInterval(3600)))
        }
    }

    @Test(arguments: TransportKind.allCases)
    func anAlreadyCancelledRequestDoesNotWaitForARefresh(_ kind: TransportKind) async throws {
        try await self.withAuth(kind, token: Self.expired, prepare: { $0.state.withLock { $0.holdRefreshes = true } }) { setup in
            let (finish, _) = Finish.start(preCancelled: true) { try await setup.client.send(Self.article("/api/a")) }
            #expect(await eventually(seconds: Self.heldBack) { finish.isDone })
            #expect(finish.error?.kind == .cancelled)
            #expect(setup.auth.refreshCount == 0)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aRequestWaitingForARefreshEndsWhenCancelledAndTheRefreshServesTheOthers(_ kind: TransportKind) async throws {
        try await self.withAuth(kind, token: Self.expired, prepare: { $0.state.withLock { $0.holdRefreshes = true } }) { setup in
            let (first, task) = Finish.start { try await setup.client.send(Self.article("/api/a")) }
            #expect(await eventually { setup.tokens.state.withLock { $0.refreshCalls } == 1 })
            let (second, _) = Finish.start { try await setup.client.send(Self.article("/api/b")) }
            task.cancel()
            #expect(await eventually(seconds: Self.heldBack) { first.isDone })
            #expect(first.error?.kind == .cancelled)
            #expect(!second.isDone)
            setup.tokens.state.withLock { $0.holdRefreshes = false }
            #expect(await eventually { second.isDone })
            #expect(second.value?.title == "t-1")
            #expect(setup.tokens.state.withLock { $0.refreshCalls } == 1)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aRequestWaitingForARefreshEndsAtItsDeadline(_ kind: TransportKind) async throws {
        try await self.withAuth(kind, token: Self.expired, prepare: { $0.state.withLock { $0.holdRefreshes = true } }) { setup in
            let (finish, _) = Finish.start { try await setup.client.send(Self.article("/api/a", timeout: .milliseconds(300))) }
            #expect(await eventually(seconds: Self.heldBack) { finish.isDone })
            #expect(finish.error?.kind == .timeout)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aStartedRequestWaitingForARefreshEndsAtItsDeadlineAndOnCancelAll(_ kind: TransportKind) async throws {
        // A started request runs in a task of its own, which the deadline and `cancelAll` cancel
        // (no second task): the refresh wait ends either way, and the refresh goes on.
        try await self.withAuth(kind, token: Self.expired, prepare: { $0.state.withLock { $0.holdRefreshes = true } }) { setup in
            let late = setup.client.start(Self.article("/api/a", timeout: .milliseconds(300)))
            let timedOut = await expectCourierError { _ = try await late.value }
            #expect(timedOut?.kind == .timeout)
            #expect(!late.isCancelled)
            let waiting = setup.client.start(Self.article("/api/b"))
            #expect(await eventually { setup.auth.refreshCount == 1 && setup.client.parts.lifecycle.runningCount == 1 })
            #expect(setup.client.cancelAll(reason: "signing out") == 1)
            let cancelled = await expectCourierError { _ = try await waiting.value }
            #expect(cancelled?.kind == .cancelled)
            #expect(cancelled?.message == "signing out")
            #expect(!waiting.isCancelled)
            setup.tokens.state.withLock { $0.holdRefreshes = false }
            let next = try await setup.client.start(Self.article("/api/c")).value
            #expect(next.title == "t-1")
            #expect(setup.tokens.state.withLock { $0.refreshCalls } == 1)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aStartedRequestHeldWhileSignedOutEndsAtItsDeadlineAndOnCancelAll(_ kind: TransportKind) async throws {
        try await self.withAuth(kind, token: nil, configuration: Self.holding) { setup in
            let late = setup.client.start(Self.article("/api/held", timeout: .milliseconds(300)))
            let timedOut = await expectCourierError { _ = try await late.value }
            #expect(timedOut?.kind == .timeout)
            #expect(await eventually(seconds: Self.heldBack) { setup.auth.heldCount == 0 })
            let held = setup.client.start(Self.article("/api/held"))
            #expect(await eventually { setup.auth.heldCount == 1 })
            #expect(setup.client.cancelAll(reason: "signing out") == 1)
            let cancelled = await expectCourierError { _ = try await held.value }
            #expect(cancelled?.kind == .cancelled)
            #expect(cancelled?.message == "signing out")
            #expect(await eventually(seconds: Self.heldBack) { setup.auth.heldCount == 0 && setup.client.traffic.inFlight == 0 })
            try setup.auth.supply(OAuth2Token(accessToken: "late", expiresAt: Date().addingTimeInterval(3600)))
        }
    }

    /// A gate whose prerequisite runs until the test lets it finish.
    final class HeldPrerequisite: Sendable {
        let state = Locked((started: 0, released: false))

        func fetch() async throws -> String {
            let run = self.state.withLock { state -> Int in
                state.started += 1
                return state.started
            }
            let until = Date().addingTimeInterval(60)
            while !self.state.withLock({ $0.released }), Date() < until {
                try? await Task.sleep(for: .milliseconds(10))
            }
            return "crumb-\(run)"
        }

        func release() { self.state.withLock { $0.released = true } }

        func gate() -> PrerequisiteGate<String> {
            PrerequisiteGate<String>(
                fetch: { try await self.fetch() },
                apply: { crumb, request in
                    request.head.headerFields[HTTPField.Name("X-Crumb")!] = crumb
                })
        }
    }

    static func echo(timeout: Duration? = nil) -> Endpoint<Echo> {
        var endpoint = Endpoint<Echo>(path: "/echo", timeout: timeout)
        endpoint.deduplication = .disabled
        return endpoint
    }

    @Test(arguments: TransportKind.allCases)
    func anAlreadyCancelledRequestDoesNotWaitForAPrerequisite(_ kind: TransportKind) async throws {
        let prerequisite = HeldPrerequisite()
        let gate = prerequisite.gate()
        defer { prerequisite.release() }
        let server = try await http1Server()
        try await withClient(kind, server: server, configure: { $0.middleware = [gate] }) { client in
            let (finish, _) = Finish.start(preCancelled: true) { try await client.send(Self.echo()) }
            #expect(await eventually(seconds: Self.heldBack) { finish.isDone })
            #expect(finish.error?.kind == .cancelled)
            #expect(gate.runCount == 0)
            prerequisite.release()
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aRequestWaitingForAPrerequisiteEndsWhenCancelledAndTheResultServesTheNext(_ kind: TransportKind) async throws {
        let prerequisite = HeldPrerequisite()
        let gate = prerequisite.gate()
        defer { prerequisite.release() }
        let server = try await http1Server()
        try await withClient(kind, server: server, configure: { $0.middleware = [gate] }) { client in
            let (finish, task) = Finish.start { try await client.send(Self.echo()) }
            #expect(await eventually { prerequisite.state.withLock { $0.started } == 1 })
            task.cancel()
            #expect(await eventually(seconds: Self.heldBack) { finish.isDone })
            #expect(finish.error?.kind == .cancelled)
            prerequisite.release()
            let next = try await client.send(Self.echo())
            #expect(next.headers["x-crumb"] == "crumb-1")
            #expect(gate.runCount == 1)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aRequestWaitingForAPrerequisiteEndsAtItsDeadline(_ kind: TransportKind) async throws {
        let prerequisite = HeldPrerequisite()
        let gate = prerequisite.gate()
        defer { prerequisite.release() }
        let server = try await http1Server()
        try await withClient(kind, server: server, configure: { $0.middleware = [gate] }) { client in
            let (finish, _) = Finish.start { try await client.send(Self.echo(timeout: .milliseconds(300))) }
            #expect(await eventually(seconds: Self.heldBack) { finish.isDone })
            #expect(finish.error?.kind == .timeout)
            prerequisite.release()
        }
    }

    // MARK: - 2. A late refresh does not overwrite newer credentials

    @Test(arguments: TransportKind.allCases, ["supply", "signIn"])
    func aRefreshFinishingAfterNewCredentialsDoesNotReplaceThem(_ kind: TransportKind, how: String) async throws {
        try await self.withAuth(kind, token: Self.expired, prepare: { $0.state.withLock { $0.holdRefreshes = true } }) { setup in
            let (waiting, _) = Finish.start { try await setup.client.send(Self.article("/api/a")) }
            #expect(await eventually { setup.tokens.state.withLock { $0.refreshCalls } == 1 })
            let expected: String
            if how == "supply" {
                setup.tokens.state.withLock { _ = $0.valid.insert("supplied") }
                try setup.auth.supply(
                    OAuth2Token(accessToken: "supplied", refreshToken: "r-supplied", expiresAt: Date().addingTimeInterval(3600)))
                expected = "supplied"
            } else {
                try await setup.auth.signIn(username: "ada", password: "s3cret")
                expected = "t-1"
            }
            // The waiting request continues with the new credentials, without the refresh.
            #expect(await eventually(seconds: Self.heldBack) { waiting.isDone })
            #expect(waiting.value?.title == expected)
            setup.tokens.state.withLock { $0.holdRefreshes = false }
            #expect(await eventually { setup.auth.runningRefreshes == 0 })
            #expect(setup.auth.token?.accessToken == expected)
            #expect(setup.store.saved.current.token?.accessToken == expected)
            let after = try await setup.client.send(Self.article("/api/b"))
            #expect(after.title == expected)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aRefreshFinishingAfterSignOutDoesNotSignBackIn(_ kind: TransportKind) async throws {
        try await self.withAuth(kind, token: Self.expired, prepare: { $0.state.withLock { $0.holdRefreshes = true } }) { setup in
            let (waiting, _) = Finish.start { try await setup.client.send(Self.article("/api/a")) }
            #expect(await eventually { setup.tokens.state.withLock { $0.refreshCalls } == 1 })
            try setup.auth.signOut()
            #expect(await eventually(seconds: Self.heldBack) { waiting.isDone })
            #expect(waiting.error?.kind == .authenticationRequired)
            setup.tokens.state.withLock { $0.holdRefreshes = false }
            #expect(await eventually { setup.auth.runningRefreshes == 0 })
            #expect(setup.auth.token == nil)
            #expect(setup.store.saved.current.token == nil)
            let after = await expectCourierError { _ = try await setup.client.send(Self.article("/api/b")) }
            #expect(after?.kind == .authenticationRequired)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aRefusedRefreshFinishingAfterNewCredentialsDoesNotSignOut(_ kind: TransportKind) async throws {
        try await self.withAuth(
            kind, token: Self.expired,
            prepare: {
                $0.state.withLock {
                    $0.holdRefreshes = true
                    $0.refreshFails = true
                }
            }
        ) { setup in
            let (waiting, _) = Finish.start { try await setup.client.send(Self.article("/api/a")) }
            #expect(await eventually { setup.tokens.state.withLock { $0.refreshCalls } == 1 })
            setup.tokens.state.withLock { _ = $0.valid.insert("supplied") }
            try setup.auth.supply(OAuth2Token(accessToken: "supplied", expiresAt: Date().addingTimeInterval(3600)))
            setup.tokens.state.withLock { $0.holdRefreshes = false }
            #expect(await eventually { waiting.isDone && setup.auth.runningRefreshes == 0 })
            #expect(waiting.value?.title == "supplied")
            #expect(setup.auth.token?.accessToken == "supplied")
            #expect(setup.store.saved.current.token?.accessToken == "supplied")
        }
    }

    // MARK: - 3. Tokens shorter-lived than the refresh margin

    @Test(arguments: TransportKind.allCases)
    func aTokenShorterLivedThanTheMarginIsUsedNotRefreshedInALoop(_ kind: TransportKind) async throws {
        // 10-minute tokens under a 15-minute margin: shorter-lived than the margin, and long
        // enough that a loaded machine never lets one expire during the test (20-second tokens
        // under the 30-second default margin did, once, when the test took 29 s).
        var configuration = OAuth2Authenticator.Configuration()
        configuration.refreshMargin = .seconds(900)
        try await self.withAuth(
            kind, token: Self.expired, configuration: configuration, prepare: { $0.state.withLock { $0.lifetime = 600 } }
        ) { setup in
            for index in 0..<6 {
                let article = try await setup.client.send(Self.article("/api/\(index)"))
                #expect(article.title == "t-1")
            }
            #expect(setup.tokens.state.withLock { $0.refreshCalls } == 1)
            #expect(setup.auth.refreshCount == 1)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aSuppliedShortLivedTokenIsUsedAsIs(_ kind: TransportKind) async throws {
        // A 2-minute token under a 10-minute margin: shorter-lived than the margin, with a minute
        // of slack for a loaded machine.
        let short = OAuth2Token(accessToken: "short", refreshToken: "r-short", expiresAt: Date().addingTimeInterval(120))
        var configuration = OAuth2Authenticator.Configuration()
        configuration.refreshMargin = .seconds(600)
        try await self.withAuth(kind, token: short, configuration: configuration) { setup in
            for index in 0..<3 {
                let article = try await setup.client.send(Self.article("/api/\(index)"))
                #expect(article.title == "short")
            }
            #expect(setup.tokens.state.withLock { $0.refreshCalls } == 0)
        }
    }

    // MARK: - 4. Invalidation during the prerequisite's fetch

    @Test(arguments: TransportKind.allCases)
    func invalidatingDuringTheFetchMakesTheNextRequestRunItAgain(_ kind: TransportKind) async throws {
        let prerequisite = HeldPrerequisite()
        let gate = prerequisite.gate()
        defer { prerequisite.release() }
        let server = try await http1Server()
        try await withClient(kind, server: server, configure: { $0.middleware = [gate] }) { client in
            let (first, _) = Finish.start { try await client.send(Self.echo()) }
            #expect(await eventually { prerequisite.state.withLock { $0.started } == 1 })
            gate.invalidate()
            prerequisite.release()
            #expect(await eventually { first.isDone })
            #expect(first.value?.headers["x-crumb"] == "crumb-1")
            let next = try await client.send(Self.echo())
            #expect(next.headers["x-crumb"] == "crumb-2")
            #expect(gate.runCount == 2)
            let again = try await client.send(Self.echo())
            #expect(again.headers["x-crumb"] == "crumb-2")
            #expect(gate.runCount == 2)
        }
    }

    // MARK: - 5. A 401 from another origin

    @Test(arguments: TransportKind.allCases)
    func anUnauthorizedFromAnotherOriginAfterARedirectIsReturnedWithoutARefresh(_ kind: TransportKind) async throws {
        let other = try await http1Server { _ in
            .text("no", status: 401, headers: [("WWW-Authenticate", #"Bearer realm="elsewhere", error="invalid_token""#)])
        }
        let fresh = OAuth2Token(accessToken: "t-0", refreshToken: "r-0", expiresAt: Date().addingTimeInterval(3600))
        try await self.withAuth(kind, token: fresh) { setup in
            let target = other.baseURL.appendingPathComponent("private").absoluteString
            var endpoint = Endpoint<Void>(path: "/to", query: ["url": target], acceptedStatuses: 200..<500, decoding: .none)
            endpoint.deduplication = .disabled
            let response = try await setup.client.response(endpoint)
            #expect(response.status.code == 401)
            #expect(setup.tokens.state.withLock { $0.refreshCalls } == 0)
            #expect(setup.auth.refreshCount == 0)
            #expect(setup.server.requests.filter { $0.path == "/to" }.count == 1)
            #expect(other.requests.count == 1)
            // A 401 from our own origin still refreshes.
            setup.tokens.state.withLock { $0.valid.remove("t-0") }
            let own = try await setup.client.send(Self.article("/api/own"))
            #expect(own.title == "t-1")
            #expect(setup.tokens.state.withLock { $0.refreshCalls } == 1)
        }
        try await other.stop()
    }

    @Test(arguments: TransportKind.allCases)
    func anUnauthorizedAfterARedirectThroughAnotherOriginIsReturnedWithoutARefresh(_ kind: TransportKind) async throws {
        // A → B → A: the hop to B, and the one back, go without the token (RFC 9110 §15.4), so
        // the 401 of the last hop says nothing about it, though it comes from the token's own
        // origin (RFC 6750 §3.1). No refresh, which would rotate the refresh token and spend one
        // of the few refreshes allowed per window.
        let fresh = OAuth2Token(accessToken: "t-0", refreshToken: "r-0", expiresAt: Date().addingTimeInterval(3600))
        try await self.withAuth(kind, token: fresh) { setup in
            let back = setup.server.baseURL.appendingPathComponent("api/back").absoluteString
            let other = try await http1Server { _ in ScriptedResponse(status: 302, headers: [("Location", back)]) }
            var endpoint = Endpoint<Void>(
                path: "/to", query: ["url": other.baseURL.appendingPathComponent("bounce").absoluteString], acceptedStatuses: 200..<500,
                decoding: .none)
            endpoint.deduplication = .disabled
            let response = try await setup.client.response(endpoint)
            #expect(response.status.code == 401)
            #expect(setup.server.requests.last?.path == "/api/back")
            #expect(setup.server.requests.last?.header("authorization") == nil)
            #expect(setup.tokens.state.withLock { $0.refreshCalls } == 0)
            #expect(setup.auth.refreshCount == 0)
            try await other.stop()
        }
    }

    // MARK: - 6. Signed uploads

    @Test(arguments: TransportKind.allCases, [false, true])
    func anUploadOfDataIsSignedOverTheBytesSent(_ kind: TransportKind, compressed: Bool) async throws {
        let key = SymmetricKey(data: Data("upload-signing-key".utf8))
        let verifier = SignatureVerifier(key: key, maxSkew: 60)
        let outcomes = Locked<[String]>([])
        let server = try await http1Server { request in
            do {
                try verifier.verify(
                    method: request.method, target: request.uri, body: request.body,
                    signature: request.header("x-signature"), timestamp: request.header("x-signature-timestamp"),
                    nonce: request.header("x-signature-nonce"))
                outcomes.withLock { $0.append("ok") }
                return .json(#"{"id":\#(request.body.count),"title":"verified"}"#)
            } catch {
                outcomes.withLock { $0.append("\(error)") }
                return .text("\(error)", status: 401)
            }
        }
        let content = Data((0..<200_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) })
        try await withClient(kind, server: server, configure: { $0.middleware = [RequestSigner(key: key, keyID: "k1")] }) { client in
            var endpoint = Endpoint<Article>(
                method: .post, path: "/uploads", query: ["name": "blob"], body: .data(content, contentType: "application/octet-stream"))
            endpoint.compressesRequestBody = compressed
            let transfer = client.upload(endpoint)
            let seen = Task { await transfer.progress.reduce(into: [TransferProgress]()) { $0.append($1) } }
            let response = try await transfer.value
            #expect(response.value.title == "verified")
            #expect(outcomes.current == ["ok"])
            let recorded = try #require(server.requests.last)
            if compressed {
                #expect(recorded.header("content-encoding") == "gzip")
                #expect(recorded.body != content)
            } else {
                #expect(recorded.body == content)
            }
            #expect(response.value.id == recorded.body.count)
            let progress = await seen.value
            #expect(progress.last?.completedBytes == Int64(recorded.body.count))
        }
    }
}
