import Courier
import CourierAsyncHTTPClient
import CourierTestServer
import CourierTesting
import Foundation
import GRDB
import HTTPTypes
import Testing

@testable import CourierOutbox

/// A server that applies each `Idempotency-Key` once, as an idempotent API does (a repeat is
/// answered without being applied again), and remembers every request it saw.
final class IdempotentServer: Sendable {
    struct State {
        /// The key of every request that arrived, repeats included.
        var seen: [String] = []
        /// The keys applied, in order: each once.
        var applied: [String] = []
        var bodies: [Data] = []
    }

    let state = Locked(State())
    let script: @Sendable (RecordedRequest, Int) -> ScriptedResponse?

    /// `script` may answer a request itself (by its path and how many times its key was seen).
    init(script: @escaping @Sendable (RecordedRequest, Int) -> ScriptedResponse? = { _, _ in nil }) {
        self.script = script
    }

    func respond(_ request: RecordedRequest) async -> ScriptedResponse {
        let key = request.header("idempotency-key") ?? "none"
        let count = self.state.withLock { state -> Int in
            state.seen.append(key)
            return state.seen.filter { $0 == key }.count
        }
        if let scripted = self.script(request, count) { return scripted }
        let first = self.state.withLock { state -> Bool in
            guard !state.applied.contains(key) else { return false }
            state.bodies.append(request.body)
            state.applied.append(key)
            return true
        }
        return .json(#"{"applied":\#(first)}"#, status: first ? 201 : 200)
    }
}

@Suite("Durable outbox: stored before sent, delivered once, across restarts", .serialized)
struct OutboxTests {
    /// Waits until the wall clock reads later than `date` (a state, not a time span): items
    /// finished at `date` are then past a retention of zero.
    static func untilTheClockPasses(_ date: Date?) async {
        guard let date else { return }
        while Date() <= date { await Task.yield() }
    }

    static func databasePath() -> String {
        FileManager.default.temporaryDirectory.appendingPathComponent("courier-outbox-\(UUID().uuidString).sqlite").path
    }

    static func post(_ path: String, _ json: String = #"{"text":"hi"}"#) -> Endpoint<Data> {
        Endpoint<Data>(
            name: "send", method: .post, path: path, body: .data(Data(json.utf8), contentType: "application/json"), decoding: .data)
    }

    /// Runs `body` with a client on `kind` talking to `server` and an outbox at a fresh path.
    static func withOutbox(
        _ kind: TransportKind, server: TestServer, path: String = databasePath(), configuration: Outbox.Configuration = .init(),
        configure: @escaping (inout Client.Configuration) -> Void = { _ in }, _ body: (Outbox, Client, String) async throws -> Void
    ) async throws {
        try await withClient(
            kind, server: server,
            configure: {
                $0.retry = .never
                configure(&$0)
            }
        ) { client in
            let outbox = try Outbox(path: path, client: client, configuration: configuration)
            try await body(outbox, client, path)
            await outbox.stop()
        }
    }

    static var fast: Outbox.Configuration {
        var configuration = Outbox.Configuration()
        configuration.baseDelay = .milliseconds(10)
        configuration.maxDelay = .milliseconds(50)
        return configuration
    }

    /// A shut-down client refuses every request with kind `cancelled`, which is not the item's
    /// failure: the item went back in line after `baseDelay` and `deliverAll()` asked again, for
    /// ever (with a `baseDelay` of zero, in a busy loop). It now returns, the item pending and
    /// its attempts not counted, for an outbox on a client that runs.
    @Test(arguments: TransportKind.allCases)
    func deliveringReturnsOnceTheClientIsShutDown(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        var configuration = Outbox.Configuration()
        configuration.baseDelay = .zero
        try await Self.withOutbox(kind, server: server, configuration: configuration) { outbox, client, _ in
            let id = try outbox.enqueue(Self.post("/messages"))
            await client.shutdown(gracePeriod: .zero)
            let returned = Locked(false)
            let delivering = Task {
                await outbox.deliverAll()
                returned.withLock { $0 = true }
            }
            #expect(await eventually { returned.current })
            delivering.cancel()
            await delivering.value
            let item = try #require(try outbox.item(id))
            #expect(item.state == .pending)
            #expect(item.attempts == 0)
            #expect(server.requests.isEmpty)
        }
    }

    /// The client's default fields are not stored with an item: a credential among them is
    /// never on disk, and the one current at delivery is sent (a token rotated since the item was
    /// stored would be refused); the endpoint's own fields are stored and sent.
    @Test(arguments: TransportKind.allCases)
    func defaultFieldsApplyAtDeliveryAndAreNotStored(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        let path = Self.databasePath()
        defer { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
        // Stored by a client of the day it was stored (which sends nothing)...
        let (transport, shutdown) = makeTransport(kind)
        let storing = Client(
            configuration: .init(transport: transport, baseURL: server.baseURL) {
                $0.defaultHeaders[.authorization] = "Bearer stored-day-secret"
                $0.defaultHeaders[HTTPField.Name("X-Tenant")!] = "default-tenant"
                $0.defaultHeaders[HTTPField.Name("X-Api-Version")!] = "2"
            })
        let stored = try Outbox(path: path, client: storing)
        // The endpoint's own value of a field the defaults also set is the endpoint's: stored,
        // even when it equals the default of the day.
        _ = try stored.enqueue(
            Self.post("/echo").header("X-Note", "own").header("X-Tenant", "own-tenant").header("X-Api-Version", "2"), queue: "q")
        await stored.stop()
        try await shutdown()
        var file = Data()
        for suffix in ["", "-wal"] { file += (try? Data(contentsOf: URL(fileURLWithPath: path + suffix))) ?? Data() }
        #expect(!file.isEmpty)
        #expect(file.range(of: Data("stored-day-secret".utf8)) == nil)
        #expect(file.range(of: Data("own".utf8)) != nil)
        #expect(server.requests.isEmpty)
        // ...and delivered by the client of the day it is sent.
        try await Self.withOutbox(
            kind, server: server, path: path,
            configure: {
                $0.defaultHeaders[.authorization] = "Bearer rotated"
                $0.defaultHeaders[HTTPField.Name("X-Tenant")!] = "default-tenant"
                $0.defaultHeaders[HTTPField.Name("X-Api-Version")!] = "3"
            }
        ) { outbox, _, _ in
            await outbox.deliverAll()
            let delivered = try outbox.items(in: .delivered)
            #expect(delivered.count == 1)
        }
        #expect(server.requests.count == 1)
        #expect(server.requests.last?.header("Authorization") == "Bearer rotated")
        #expect(server.requests.last?.header("X-Note") == "own")
        #expect(server.requests.last?.header("X-Tenant") == "own-tenant")
        #expect(server.requests.last?.header("X-Api-Version") == "2")
    }

    /// Settings no outbox can use are brought into range when it opens: a busy timeout past
    /// SQLite's 32 bits of milliseconds stopped the process at open, a base delay of 2^63 seconds
    /// overflowed at the sixth attempt, a negative body limit stopped it at the first answer
    /// (and the item, in flight, was sent again at every launch).
    @Test(arguments: TransportKind.allCases)
    func hostileSettingsAreBroughtIntoRange(_ kind: TransportKind) async throws {
        let api = IdempotentServer { _, count in count <= 6 ? .text("busy", status: 503) : nil }
        let server = try await http1Server(api.respond)
        var configuration = Outbox.Configuration()
        configuration.busyTimeout = .seconds(Int64.max)
        configuration.baseDelay = .seconds(Int64.max)
        configuration.maxDelay = .seconds(-5)
        configuration.resultBodyLimit = -1
        configuration.maxAttempts = Int.min
        configuration.deliveredRetention = .seconds(Int64.min)
        try await Self.withOutbox(kind, server: server, configuration: configuration) { outbox, _, _ in
            #expect(outbox.configuration.busyTimeout == .seconds(2_147_483))
            #expect(outbox.configuration.baseDelay == .seconds(Int64(1) << 31))
            #expect(outbox.configuration.maxDelay == .zero)
            #expect(outbox.configuration.resultBodyLimit == 0)
            #expect(outbox.configuration.maxAttempts == 1)
            let id = try outbox.enqueue(Self.post("/a"), maxAttempts: 10)
            await outbox.deliverAll()
            let item = try #require(try outbox.item(id))
            #expect(item.state == .delivered)
            #expect(item.attempts == 7)
            #expect(item.result?.status == 201)
            #expect(item.result?.body.isEmpty == true)
        }
    }

    /// Outbox × `cancelAll`: a delivery the server answered, cancelled before the answer reached
    /// the outbox (an app signing out as it came), was delivered: it is not sent again.
    @Test(arguments: TransportKind.allCases)
    func aDeliveryCancelledAfterItsAnswerCameIsDelivered(_ kind: TransportKind) async throws {
        let api = IdempotentServer { _, _ in nil }
        let server = try await http1Server(api.respond)
        let box = Locked<Client?>(nil)
        let cancelled = Locked<Int?>(nil)
        let signingOut = ClosureMiddleware { request, next in
            var response = try await next(request)
            // The whole answer in hand before the cancel: no body read is left for it to stop.
            response.body = .data(try await response.body.collect(upTo: 1 << 20))
            if cancelled.current == nil { cancelled.withLock { $0 = box.current?.cancelAll(reason: "signing out") } }
            return response
        }
        try await Self.withOutbox(kind, server: server, configure: { $0.middleware = [signingOut] }) { outbox, client, _ in
            box.withLock { $0 = client }
            let id = try outbox.enqueue(Self.post("/a"))
            await outbox.deliverAll()
            #expect(cancelled.current == 1)
            let item = try #require(try outbox.item(id))
            #expect(item.state == .delivered)
            #expect(item.result?.status == 201)
            #expect(server.requests.count == 1)
        }
    }

    /// draft-ietf-httpapi-idempotency-key-header §2.6: a request sent again while the server
    /// still processes the first under the same key gets 409 — the item is tried again later,
    /// not dead (the server may well apply it). A 409 to a first attempt is the server's answer.
    @Test(arguments: TransportKind.allCases)
    func aConflictWhileTheFirstAttemptIsProcessedIsTriedAgain(_ kind: TransportKind) async throws {
        let api = IdempotentServer { request, count in
            if request.path == "/taken" { return .text("taken", status: 409) }
            switch count {
            case 1: return .text("busy", status: 503)
            case 2: return .text("a request with this key is being processed", status: 409)
            default: return nil
            }
        }
        let server = try await http1Server(api.respond)
        try await Self.withOutbox(kind, server: server, configuration: Self.fast) { outbox, _, _ in
            let retried = try outbox.enqueue(Self.post("/orders"), queue: "a")
            let refused = try outbox.enqueue(Self.post("/taken"), queue: "b")
            await outbox.deliverAll()
            let item = try #require(try outbox.item(retried))
            #expect(item.state == .delivered)
            #expect(item.attempts == 3)
            #expect(api.state.current.applied.count == 1)
            let dead = try #require(try outbox.item(refused))
            #expect(dead.state == .dead)
            #expect(dead.attempts == 1)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func itemsAreDeliveredOnceWithTheirOwnKeyAndTheirResultsKept(_ kind: TransportKind) async throws {
        let api = IdempotentServer()
        let server = try await http1Server(api.respond)
        try await Self.withOutbox(kind, server: server) { outbox, _, _ in
            let ids = try (0..<3).map { try outbox.enqueue(Self.post("/messages", #"{"n":\#($0)}"#), queue: "messages") }
            #expect(try outbox.items(in: .pending).map(\.id) == ids)
            await outbox.deliverAll()
            let items = try ids.map { try #require(try outbox.item($0)) }
            #expect(items.allSatisfy { $0.state == .delivered && $0.attempts == 1 })
            #expect(items.map { $0.result?.status } == [201, 201, 201])
            #expect(items.first?.result?.body == Data(#"{"applied":true}"#.utf8))
            #expect(items.first?.result?.headers[.contentType] == "application/json")
            // Each item had its own key, sent as stored, in order.
            #expect(api.state.current.seen == items.map(\.idempotencyKey))
            #expect(Set(items.map(\.idempotencyKey)).count == 3)
            #expect(api.state.current.bodies.map { String(decoding: $0, as: UTF8.self) } == [#"{"n":0}"#, #"{"n":1}"#, #"{"n":2}"#])
        }
    }

    @Test(arguments: TransportKind.allCases)
    func a503WithRetryAfterAndAConnectionResetAreTriedAgainWithTheSameKey(_ kind: TransportKind) async throws {
        let api = IdempotentServer { request, count in
            switch (request.path, count) {
            case ("/busy", 1), ("/busy", 2): return .text("busy", status: 503, headers: [("Retry-After", "0")])
            case ("/reset", 1): return ScriptedResponse(status: 200).with(.closeBeforeResponding)
            default: return nil
            }
        }
        let server = try await http1Server(api.respond)
        try await Self.withOutbox(kind, server: server, configuration: Self.fast) { outbox, _, _ in
            let busy = try outbox.enqueue(Self.post("/busy"), queue: "a")
            let reset = try outbox.enqueue(Self.post("/reset"), queue: "b")
            await outbox.deliverAll()
            let busyItem = try #require(try outbox.item(busy))
            #expect(busyItem.state == .delivered)
            #expect(busyItem.attempts == 3)
            #expect(api.state.current.seen.filter { $0 == busyItem.idempotencyKey }.count == 3)
            let resetItem = try #require(try outbox.item(reset))
            #expect(resetItem.state == .delivered)
            #expect(resetItem.attempts == 2)
            // The reset request was sent twice with one key and applied once.
            #expect(api.state.current.seen.filter { $0 == resetItem.idempotencyKey }.count == 2)
            #expect(Set(api.state.current.applied) == [resetItem.idempotencyKey, busyItem.idempotencyKey])
            #expect(api.state.current.applied.count == 2)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func a2xxWhoseBodyIsLostIsDeliveredOnceAndAnErrorStatusStillDecides(_ kind: TransportKind) async throws {
        // The server answered: its status decides even when the body is lost (too large, cut
        // short). A 2xx sent again would apply the request twice on a server without keys.
        let api = IdempotentServer { request, count in
            let long = String(repeating: "x", count: 800)
            switch request.path {
            case "/cut": return .json(long, status: 201).with(.closeMidBody(afterBytes: 100))
            case "/big": return .json(String(repeating: "x", count: 5000), status: 201)
            case "/big-400": return .text(String(repeating: "x", count: 5000), status: 400)
            case "/cut-503" where count == 1:
                return .text(long, status: 503, headers: [("Retry-After", "0")]).with(.closeMidBody(afterBytes: 100))
            // A body that stalls past the request's deadline; one in a coding this client
            // cannot remove.
            case "/stalled": return .json(long, status: 201).with(.stallMidBody(afterBytes: 100, .seconds(30)))
            case "/coded": return .json("{}", status: 201, headers: [("Content-Encoding", "x-custom")])
            default: return nil
            }
        }
        let server = try await http1Server(api.respond)
        try await Self.withOutbox(
            kind, server: server, configuration: Self.fast,
            configure: {
                $0.maxResponseSize = 1000
                // Ends the 30 s stall; long enough for the other deliveries on a loaded machine.
                $0.timeout = .seconds(10)
            }
        ) { outbox, _, _ in
            let ids = try ["/cut", "/big", "/big-400", "/cut-503", "/stalled", "/coded"].map {
                try outbox.enqueue(Self.post($0), queue: $0)
            }
            await outbox.deliverAll()
            let items = try ids.map { try #require(try outbox.item($0)) }
            let seen = api.state.current.seen
            func sent(_ item: OutboxItem) -> Int { seen.filter { $0 == item.idempotencyKey }.count }
            for item in items[0...1] + items[4...5] {
                #expect(item.state == .delivered)
                #expect(item.attempts == 1)
                #expect(sent(item) == 1)
                #expect(item.result?.status == 201)
                #expect(item.lastError?.contains("body was lost") == true, "\(String(describing: item.lastError))")
            }
            #expect(items[2].state == .dead)
            #expect(items[2].attempts == 1)
            #expect(sent(items[2]) == 1)
            #expect(items[2].lastError?.hasPrefix("status 400") == true, "\(String(describing: items[2].lastError))")
            #expect(items[3].state == .delivered)
            #expect(items[3].attempts == 2)
            #expect(sent(items[3]) == 2)
            #expect(items[3].result?.status == 201)
            // Delivered whole on its second attempt: the first attempt's lost body is not its
            // last word.
            #expect(items[3].lastError == nil, "\(String(describing: items[3].lastError))")
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aTokenRefreshWhoseBodyIsLostDeliversNothing(_ kind: TransportKind) async throws {
        // Seam outbox × authentication: the token endpoint's 200 cut short is the refresh's
        // answer, not the item's. The item was never sent: it is not delivered, and it goes once
        // a refresh succeeds.
        let cut = Locked(true)
        let api = IdempotentServer { request, _ in
            guard request.path == "/oauth/token" else { return nil }
            let token =
                #"{"access_token":"t-1","token_type":"Bearer","expires_in":3600,"padding":"\#(String(repeating: "x", count: 800))"}"#
            return cut.current ? .json(token).with(.closeMidBody(afterBytes: 100)) : .json(token)
        }
        let server = try await http1Server(api.respond)
        let (transport, shutdown) = makeTransport(kind)
        let auth = OAuth2Authenticator(
            tokenEndpoint: OAuth2TokenEndpoint(url: server.baseURL.appendingPathComponent("oauth/token"), clientID: "app"),
            tokenClient: Client(configuration: .init(transport: transport) { $0.retry = .never }),
            store: InMemoryCredentialStore(OAuth2Token(accessToken: "t-0", refreshToken: "r-0", expiresAt: Date(timeIntervalSinceNow: -10)))
        )
        try await Self.withOutbox(kind, server: server, configuration: Self.fast, configure: { $0.middleware = [auth] }) { outbox, _, _ in
            let id = try outbox.enqueue(Self.post("/messages"), maxAttempts: 2)
            await outbox.deliverAll()
            let item = try #require(try outbox.item(id))
            #expect(item.state == .dead, "\(item.state) \(String(describing: item.lastError))")
            #expect(!api.state.current.seen.contains(item.idempotencyKey))
            cut.withLock { $0 = false }
            try outbox.retry(id)
            await outbox.deliverAll()
            #expect(try outbox.item(id)?.state == .delivered)
            #expect(api.state.current.applied == [item.idempotencyKey])
        }
        try await shutdown()
    }

    @Test(arguments: TransportKind.allCases)
    func a400IsADeadLetterWithItsErrorAndAFailingHeadBlocksOnlyItsQueue(_ kind: TransportKind) async throws {
        let api = IdempotentServer { request, _ in
            switch request.path {
            case "/bad": return .json(#"{"error":"bad"}"#, status: 400)
            case "/down": return .text("down", status: 503, headers: [("Retry-After", "3600")])
            default: return nil
            }
        }
        let server = try await http1Server(api.respond)
        try await Self.withOutbox(kind, server: server) { outbox, _, _ in
            let bad = try outbox.enqueue(Self.post("/bad"), queue: "a")
            let afterBad = try outbox.enqueue(Self.post("/ok"), queue: "a")
            let down = try outbox.enqueue(Self.post("/down"), queue: "b")
            let blocked = try outbox.enqueue(Self.post("/blocked"), queue: "b")
            let other = try outbox.enqueue(Self.post("/other"), queue: "c")
            outbox.start()
            #expect(
                await eventually { (try? outbox.item(other))?.state == .delivered && (try? outbox.item(afterBad))?.state == .delivered })
            #expect(await eventually { (try? outbox.item(down))?.attempts == 1 })
            await outbox.stop()
            let dead = try #require(try outbox.item(bad))
            #expect(dead.state == .dead)
            #expect(dead.lastError == "status 400")
            #expect(dead.result?.status == 400)
            #expect(dead.result?.body == Data(#"{"error":"bad"}"#.utf8))
            // The head of queue b waits an hour; the item behind it was never sent.
            #expect(try outbox.item(down)?.state == .pending)
            #expect(try outbox.item(blocked)?.attempts == 0)
            #expect(!api.state.current.seen.contains(try #require(try outbox.item(blocked)).idempotencyKey))
            // A dead item can be sent again.
            try outbox.retry(bad)
            #expect(try outbox.item(bad)?.state == .pending)
            #expect(try outbox.item(bad)?.attempts == 0)
            // Its earlier answer goes with its death: were it now to die of a network failure,
            // the stale 400 would read as that attempt's result.
            #expect(try outbox.item(bad)?.result == nil)
            let missing = #expect(throws: OutboxError.self) { try outbox.retry(OutboxItemID(rawValue: 999_999)) }
            #expect(missing?.kind == .notFound)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func a401RefreshesTheTokenOnceForAllItems(_ kind: TransportKind) async throws {
        let oauth = OAuthServer()
        let server = try await http1Server(oauth.respond)
        let expired = OAuth2Token(accessToken: "t-0", refreshToken: "r-0", expiresAt: Date().addingTimeInterval(-10))
        let tokenClient = Client(configuration: .init(transport: URLSessionTransport()))
        let auth = OAuth2Authenticator(
            tokenEndpoint: OAuth2TokenEndpoint(
                url: server.baseURL.appendingPathComponent("oauth/token"), clientID: "courier-tests", clientSecret: "client-secret"),
            tokenClient: tokenClient, store: InMemoryCredentialStore(expired)
        )
        try await Self.withOutbox(kind, server: server, configure: { $0.middleware = [auth] }) { outbox, _, _ in
            let ids = try (0..<5).map { try outbox.enqueue(Self.post("/api/\($0)"), queue: "q\($0)") }
            await outbox.deliverAll()
            for id in ids { #expect(try outbox.item(id)?.state == .delivered) }
            #expect(oauth.state.withLock { $0.refreshCalls } == 1)
            // The token never rests in the outbox: it is added at delivery.
            #expect(try outbox.items().allSatisfy { $0.result?.status == 200 })
        }
    }

    @Test(arguments: TransportKind.allCases)
    func twoDeliveryLoopsOfOneOutboxSendAnItemOnce(_ kind: TransportKind) async throws {
        // `start()` and `deliverAll()` at once both see the same pending head; taking it for
        // sending is one transaction that only a pending item passes, so one of them sends it.
        let api = IdempotentServer { _, _ in nil }
        let server = try await http1Server { request in
            try? await Task.sleep(for: .milliseconds(200))
            return await api.respond(request)
        }
        try await Self.withOutbox(kind, server: server) { outbox, _, _ in
            var ids: [OutboxItemID] = []
            for index in 0..<3 { ids.append(try outbox.enqueue(Self.post("/m\(index)"))) }
            outbox.start()
            await outbox.deliverAll()
            #expect(await eventually { (try? outbox.items().allSatisfy { $0.state == .delivered }) == true })
            #expect(api.state.withLock { $0.seen.count } == 3)
            #expect(try outbox.items().map(\.attempts) == [1, 1, 1])
        }
    }

    @Test(arguments: TransportKind.allCases)
    func twoDeliveryLoopsStillSendAQueueOneItemAtATimeInOrder(_ kind: TransportKind) async throws {
        // While one loop's item is on its way, the other loop must not take the next item of the
        // same queue: it would overtake the first, and be applied before it if the first fails.
        let api = IdempotentServer()
        let inProgress = Locked((now: 0, most: 0, paths: [String]()))
        let server = try await http1Server { request in
            inProgress.withLock {
                $0.now += 1
                $0.most = max($0.most, $0.now)
                $0.paths.append(request.path)
            }
            try? await Task.sleep(for: .milliseconds(200))
            inProgress.withLock { $0.now -= 1 }
            return await api.respond(request)
        }
        try await Self.withOutbox(kind, server: server) { outbox, _, _ in
            for index in 0..<3 { _ = try outbox.enqueue(Self.post("/m\(index)")) }
            outbox.start()
            await outbox.deliverAll()
            // `deliverAll()` returns once nothing is pending: it waits for items that another
            // loop's item in flight holds back, rather than return with them in line.
            #expect(try outbox.items().allSatisfy { $0.state != .pending })
            #expect(await eventually { (try? outbox.items().allSatisfy { $0.state == .delivered }) == true })
            let seen = inProgress.withLock { $0 }
            #expect(seen.most == 1)
            #expect(seen.paths == ["/m0", "/m1", "/m2"])
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aServicesHeaderFieldsAndMiddlewareApplyAtDelivery(_ kind: TransportKind) async throws {
        // The outbox promises that authentication and signing run at delivery: for an endpoint of
        // a service, that is the service's middleware too, and the service's header fields are
        // part of the stored request. Both were lost.
        let seen = Locked<[(api: String?, stamp: String?)]>([])
        let server = try await http1Server { request in
            seen.withLock { $0.append((request.header("x-api"), request.header("x-stamp"))) }
            return .text("ok")
        }
        let servers = ServerDirectory(
            urls: ["payments": [.develop: server.baseURL]], buildDefault: .develop, isReleaseBuild: false,
            store: InMemoryEnvironmentStore())
        try await Self.withOutbox(
            kind, server: server,
            configure: {
                $0.servers = servers
                $0.serviceDefaults["payments"] = ServiceDefaults(
                    middleware: [ServiceDefaultsTests.Stamp(name: "payments")], headers: [HTTPField.Name("X-Api")!: "2"])
            }
        ) { outbox, _, _ in
            let id = try outbox.enqueue(Self.post("/charge").service("payments"))
            await outbox.deliverAll()
            #expect(try outbox.item(id)?.state == .delivered)
            let requests = seen.current
            #expect(requests.count == 1)
            #expect(requests.first?.api == "2")
            #expect(requests.first?.stamp == "payments")
        }
    }

    /// A JSON body goes out labelled as it was when stored, also when the client's or the
    /// service's default fields name JSON too: the default was left out of what is stored (it
    /// applies at delivery), the body's own type was then not stored either, and the body went as
    /// `application/octet-stream`, which won over the default (a strict API answers 415, and a
    /// 4xx makes the item dead).
    @Test(arguments: TransportKind.allCases)
    func aJSONBodyKeepsItsTypeWhenTheDefaultFieldsNameJSONToo(_ kind: TransportKind) async throws {
        let types = Locked<[String: String]>([:])
        let server = try await http1Server { request in
            types.withLock { $0[request.path] = request.header("Content-Type") ?? "none" }
            return .text("ok", status: 201)
        }
        let servers = ServerDirectory(
            urls: [.main: [.develop: server.baseURL], "payments": [.develop: server.baseURL]], buildDefault: .develop,
            isReleaseBuild: false, store: InMemoryEnvironmentStore())
        let path = Self.databasePath()
        try await Self.withOutbox(
            kind, server: server, path: path,
            configure: {
                $0.servers = servers
                $0.defaultHeaders[.contentType] = "application/json; charset=utf-8"
                $0.serviceDefaults["payments"] = ServiceDefaults(headers: [.contentType: "application/json"])
            }
        ) { outbox, _, _ in
            let ids = [
                try outbox.enqueue(Self.post("/client")),
                try outbox.enqueue(Self.post("/service").service("payments")),
                try outbox.enqueue(
                    Endpoint<Data>(method: .post, path: "/encoded", body: .json(["text": "hi"]), decoding: .data), queue: "other"),
                try outbox.enqueue(Self.post("/stored-before"), queue: "old"),
            ]
            // As an item stored before the type was always kept: no fields of its own. The day's
            // default names its type, not `application/octet-stream`.
            try await Self.alter(path, "UPDATE item SET headers = '[]' WHERE id = ?", item: ids[3])
            await outbox.deliverAll()
            for id in ids { #expect(try outbox.item(id)?.state == .delivered) }
            let seen = types.current
            #expect(seen["/client"] == "application/json; charset=utf-8", "\(seen)")
            #expect(seen["/service"] == "application/json", "\(seen)")
            #expect(seen["/encoded"]?.hasPrefix("application/json") == true, "\(seen)")
            #expect(seen["/stored-before"] == "application/json; charset=utf-8", "\(seen)")
        }
    }

    @Test(arguments: TransportKind.allCases)
    func anEndpointsOwnIdempotencyKeyIsKept(_ kind: TransportKind) async throws {
        // An app that sent the request itself, timed out after the server applied it, and then
        // handed it to the outbox: the outbox sends the app's key, and the server applies it once.
        let api = IdempotentServer()
        let server = try await http1Server(api.respond)
        try await Self.withOutbox(kind, server: server) { outbox, client, _ in
            var endpoint = Self.post("/pay")
            endpoint.headers[HTTPField.Name("Idempotency-Key")!] = "app-1"
            _ = try await client.send(endpoint)
            let first = try outbox.enqueue(endpoint)
            // The same key is the same intent: one item.
            #expect(try outbox.enqueue(endpoint) == first)
            let plain = try outbox.enqueue(Self.post("/plain"))
            await outbox.deliverAll()
            #expect(try outbox.item(first)?.state == .delivered)
            #expect(try outbox.item(plain)?.state == .delivered)
            let state = api.state.withLock { $0 }
            #expect(state.seen.prefix(2) == ["app-1", "app-1"])
            #expect(state.applied.filter { $0 == "app-1" }.count == 1)
            // An endpoint without a key still gets one of its own.
            #expect(state.seen.count == 3)
            #expect(state.seen[2] != "app-1" && state.seen[2] != "none")
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aDeadItemTheAppHasNotAcknowledgedIsNeverPruned(_ kind: TransportKind) async throws {
        let api = IdempotentServer { request, _ in request.path == "/bad" ? .text("no", status: 400) : nil }
        let server = try await http1Server(api.respond)
        let path = Self.databasePath()
        try await Self.withOutbox(kind, server: server, path: path) { outbox, client, _ in
            let id = try outbox.enqueue(Self.post("/bad"))
            await outbox.deliverAll()
            #expect(try outbox.item(id)?.state == .dead)
            var keepNothing = Outbox.Configuration()
            keepNothing.deadRetention = .zero
            // Past the retention (zero) of its recorded finish: pruning could take it now.
            try await Self.untilTheClockPasses(outbox.item(id)?.finishedAt)
            let reopened = try Outbox(path: path, client: client, configuration: keepNothing)
            // Required: were it pruned, the wait for its completion below would never end.
            try #require(try reopened.item(id)?.state == .dead)
            var completions = reopened.completions().makeAsyncIterator()
            #expect(await completions.next()?.id == id)
            // Once acknowledged, it goes at the next pruning.
            try reopened.acknowledge(id)
            let pruning = try Outbox(path: path, client: client, configuration: keepNothing)
            #expect(try pruning.item(id) == nil)
        }
    }

    /// An item the app acknowledged dead and then sent again (``Outbox/retry(_:)``) has a new
    /// completion to report: it is unacknowledged again, so ``Outbox/completions()`` yields it
    /// after a restart and pruning keeps it until the app acknowledges that one (it stayed
    /// acknowledged, and its new outcome went unseen). Only a completed item can be acknowledged:
    /// a pending one would otherwise complete already acknowledged.
    @Test(arguments: TransportKind.allCases)
    func aRetriedItemIsUnacknowledgedUntilItsNewCompletionIsSeen(_ kind: TransportKind) async throws {
        // Refused at the first attempt of the item's key, applied at the second.
        let api = IdempotentServer { _, count in count == 1 ? .text("no", status: 400) : nil }
        let server = try await http1Server(api.respond)
        let path = Self.databasePath()
        try await Self.withOutbox(kind, server: server, path: path) { outbox, client, _ in
            let id = try outbox.enqueue(Self.post("/flaky"))
            await outbox.deliverAll()
            #expect(try outbox.item(id)?.state == .dead)
            try outbox.acknowledge(id)
            try outbox.retry(id)
            #expect(try outbox.item(id)?.acknowledged == false)
            do {
                try outbox.acknowledge(id)
                Issue.record("a pending item was acknowledged")
            } catch {
                #expect((error as? OutboxError)?.kind == .notFound, "\(error)")
            }
            await outbox.deliverAll()
            #expect(try outbox.item(id)?.state == .delivered)
            #expect(try outbox.item(id)?.acknowledged == false)
            var keepNothing = Outbox.Configuration()
            keepNothing.deliveredRetention = .zero
            try await Self.untilTheClockPasses(outbox.item(id)?.finishedAt)
            let reopened = try Outbox(path: path, client: client, configuration: keepNothing)
            try #require(try reopened.item(id)?.state == .delivered)
            var completions = reopened.completions().makeAsyncIterator()
            #expect(await completions.next()?.id == id)
        }
        #expect(api.state.current.seen.count == 2)
    }

    @Test(arguments: TransportKind.allCases)
    func aDeliveryStoppedOnTheWayDoesNotCountAsAnAttempt(_ kind: TransportKind) async throws {
        // `stop()` (an app going to the background) is not the item's failure: an item allowed
        // one attempt is still delivered after its first delivery was stopped on the way.
        let api = IdempotentServer()
        let gate = Gate()
        let server = try await http1Server { request in
            if request.path == "/slow" { await gate.wait() }
            return await api.respond(request)
        }
        try await Self.withOutbox(kind, server: server) { outbox, _, _ in
            let id = try outbox.enqueue(Self.post("/slow"), maxAttempts: 1)
            outbox.start()
            #expect(await eventually { server.requests.count == 1 })
            await outbox.stop()
            let stopped = try #require(try outbox.item(id))
            #expect(stopped.state == .pending)
            #expect(stopped.attempts == 0)
            await gate.open()
            await outbox.deliverAll()
            let delivered = try #require(try outbox.item(id))
            #expect(delivered.state == .delivered)
            #expect(delivered.attempts == 1)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func anItemInFlightWhenTheProcessDiedIsSentAgainAfterARestart(_ kind: TransportKind) async throws {
        let api = IdempotentServer()
        let server = try await http1Server(api.respond)
        let path = Self.databasePath()
        try await Self.withOutbox(kind, server: server, path: path) { outbox, client, _ in
            let id = try outbox.enqueue(Self.post("/m"), reference: "draft-1")
            // As if the process died after marking it in flight and sending it.
            try outbox.store.begin([(id, 0, nil)], batch: nil)
            #expect(try outbox.item(id)?.state == .inFlight)
            let reopened = try Outbox(path: path, client: client)
            #expect(try reopened.item(id)?.state == .pending)
            #expect(try reopened.item(id)?.attempts == 1)
            // The same reference is the same item.
            #expect(try reopened.enqueue(Self.post("/m"), reference: "draft-1") == id)
            await reopened.deliverAll()
            let item = try #require(try reopened.item(id))
            #expect(item.state == .delivered)
            #expect(item.attempts == 2)
            #expect(item.reference == "draft-1")
        }
    }

    @Test(arguments: TransportKind.allCases)
    func completionsIncludeThoseFromBeforeARestartUntilAcknowledged(_ kind: TransportKind) async throws {
        let api = IdempotentServer()
        let server = try await http1Server(api.respond)
        let path = Self.databasePath()
        try await Self.withOutbox(kind, server: server, path: path) { outbox, client, _ in
            let first = try outbox.enqueue(Self.post("/a"))
            let second = try outbox.enqueue(Self.post("/b"))
            await outbox.deliverAll()
            let reopened = try Outbox(path: path, client: client)
            var iterator = reopened.completions().makeAsyncIterator()
            #expect(await iterator.next()?.id == first)
            #expect(await iterator.next()?.id == second)
            try reopened.acknowledge(first)
            var again = reopened.completions().makeAsyncIterator()
            #expect(await again.next()?.id == second)
            // A live completion arrives on the open stream.
            let third = try reopened.enqueue(Self.post("/c"))
            await reopened.deliverAll()
            #expect(await again.next()?.id == third)
            // Acknowledged deliveries past retention are pruned; nothing unacknowledged is.
            var keepNothing = Outbox.Configuration()
            keepNothing.deliveredRetention = .zero
            keepNothing.deadRetention = .zero
            try await Self.untilTheClockPasses([first, second, third].compactMap { try reopened.item($0)?.finishedAt }.max())
            let pruning = try Outbox(path: path, client: client, configuration: keepNothing)
            #expect(try pruning.items().map(\.id) == [second, third])
        }
    }

    @Test(arguments: TransportKind.allCases)
    func expiredItemsAndItemsOutOfAttemptsAreDeadNotDropped(_ kind: TransportKind) async throws {
        let api = IdempotentServer { request, _ in
            request.path == "/down" ? .text("down", status: 503, headers: [("Retry-After", "0")]) : nil
        }
        let server = try await http1Server(api.respond)
        try await Self.withOutbox(kind, server: server, configuration: Self.fast) { outbox, _, _ in
            let expired = try outbox.enqueue(Self.post("/late"), queue: "a", expiresAfter: .zero)
            let tired = try outbox.enqueue(Self.post("/down"), queue: "b", maxAttempts: 2)
            await outbox.deliverAll()
            #expect(try outbox.item(expired)?.state == .dead)
            #expect(try outbox.item(expired)?.lastError == "expired before it could be delivered")
            #expect(try outbox.item(expired)?.attempts == 0)
            let out = try #require(try outbox.item(tired))
            #expect(out.state == .dead)
            #expect(out.attempts == 2)
            #expect(out.lastError == "status 503 (after 2 attempts)")
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aBatchingQueueSendsItemsTogetherAndEachKeepsItsState(_ kind: TransportKind) async throws {
        let api = IdempotentServer()
        let server = try await http1Server(api.respond)
        var configuration = Self.fast
        configuration.batches["analytics"] = .jsonArray(
            maxCount: 3, maxAge: .milliseconds(100), url: server.baseURL.absoluteString + "/events")
        try await Self.withOutbox(kind, server: server, configuration: configuration) { outbox, _, _ in
            let ids = try (0..<7).map { try outbox.enqueue(Self.post("/events", #"{"e":\#($0)}"#), queue: "analytics") }
            await outbox.deliverAll()
            for id in ids { #expect(try outbox.item(id)?.state == .delivered) }
            let bodies = api.state.current.bodies.map { String(decoding: $0, as: UTF8.self) }
            #expect(bodies == [#"[{"e":0},{"e":1},{"e":2}]"#, #"[{"e":3},{"e":4},{"e":5}]"#, #"[{"e":6}]"#])
            #expect(api.state.current.seen.allSatisfy { $0.hasPrefix("batch-") })
            #expect(Set(api.state.current.seen).count == 3)
        }
    }

    /// A batch is sent as the outbox makes it, as its items would be: not boxed by a client whose
    /// default wire protocol boxes calls (JSON-RPC). It went out as a JSON-RPC envelope with a
    /// fresh id at each attempt, its REST answer could not be unboxed, and the batch died though
    /// the server had applied it.
    @Test(arguments: TransportKind.allCases)
    func aBatchIsNotBoxedByTheClientsDefaultWireProtocol(_ kind: TransportKind) async throws {
        let api = IdempotentServer()
        let server = try await http1Server(api.respond)
        var configuration = Self.fast
        configuration.batches["analytics"] = .jsonArray(
            maxCount: 2, maxAge: .milliseconds(100), url: server.baseURL.absoluteString + "/events")
        try await Self.withOutbox(
            kind, server: server, configuration: configuration, configure: { $0.defaultWireProtocol = JSONRPCProtocol() }
        ) { outbox, _, _ in
            let ids = try (0..<2).map {
                var item = Self.post("/events", #"{"e":\#($0)}"#)
                item.wire = RESTProtocol()
                return try outbox.enqueue(item, queue: "analytics")
            }
            await outbox.deliverAll()
            for id in ids {
                let item = try outbox.item(id)
                #expect(item?.state == .delivered, "\(String(describing: item?.lastError))")
            }
            let bodies = api.state.current.bodies.map { String(decoding: $0, as: UTF8.self) }
            #expect(bodies == [#"[{"e":0},{"e":1}]"#])
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aBatchIsFlushedWhenItsBodiesReachTheByteLimit(_ kind: TransportKind) async throws {
        let api = IdempotentServer()
        let server = try await http1Server(api.respond)
        var configuration = Self.fast
        // Seven-byte bodies: five fit in 40 bytes, the sixth would not; the last waits for its age.
        configuration.batches["analytics"] = .jsonArray(
            maxCount: 10, maxBytes: 40, maxAge: .milliseconds(300), url: server.baseURL.absoluteString + "/events")
        try await Self.withOutbox(kind, server: server, configuration: configuration) { outbox, _, _ in
            _ = try (0..<6).map { try outbox.enqueue(Self.post("/events", #"{"e":\#($0)}"#), queue: "analytics") }
            await outbox.deliverAll()
            let bodies = api.state.current.bodies.map { String(decoding: $0, as: UTF8.self) }
            #expect(bodies == [#"[{"e":0},{"e":1},{"e":2},{"e":3},{"e":4}]"#, #"[{"e":5}]"#])
            #expect(try outbox.items().allSatisfy { $0.state == .delivered })
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aFailedBatchIsSentAgainWithTheSameItemsAndKey(_ kind: TransportKind) async throws {
        let api = IdempotentServer { _, count in count == 1 ? .text("busy", status: 503, headers: [("Retry-After", "0")]) : nil }
        let server = try await http1Server(api.respond)
        var configuration = Self.fast
        configuration.batches["analytics"] = .jsonArray(
            maxCount: 2, maxAge: .milliseconds(10), url: server.baseURL.absoluteString + "/events")
        try await Self.withOutbox(kind, server: server, configuration: configuration) { outbox, _, _ in
            _ = try (0..<2).map { try outbox.enqueue(Self.post("/events", #"{"e":\#($0)}"#), queue: "analytics") }
            await outbox.deliverAll()
            let seen = api.state.current.seen
            #expect(seen.count == 2)
            #expect(seen[0] == seen[1])
            #expect(try outbox.items().allSatisfy { $0.state == .delivered && $0.attempts == 2 })
        }
    }

    /// The clock set back after a retry was scheduled (here six hours: the stored time moved six
    /// hours ahead) holds the item no longer than `maxDelay`, as a batch's first item no longer
    /// than its `maxAge` (it was created "in the future" then): the wait was the stored date.
    @Test(arguments: TransportKind.allCases)
    func aClockSetBackHoldsAnItemNoLongerThanTheLongestWait(_ kind: TransportKind) async throws {
        let api = IdempotentServer()
        let server = try await http1Server(api.respond)
        var configuration = Self.fast
        configuration.batches["analytics"] = .jsonArray(
            maxCount: 5, maxAge: .milliseconds(50), url: server.baseURL.absoluteString + "/events")
        let path = Self.databasePath()
        try await Self.withOutbox(kind, server: server, path: path, configuration: configuration) { outbox, _, _ in
            let retried = try outbox.enqueue(Self.post("/messages"), queue: "messages")
            let batched = try outbox.enqueue(Self.post("/events", #"{"e":1}"#), queue: "analytics")
            let later = Date().addingTimeInterval(6 * 3600).timeIntervalSince1970
            let database = try DatabaseQueue(path: path)
            try await database.write { db in
                try db.execute(sql: "UPDATE item SET next_attempt_at = ?, attempts = 1 WHERE id = ?", arguments: [later, retried.rawValue])
                try db.execute(sql: "UPDATE item SET created_at = ? WHERE id = ?", arguments: [later, batched.rawValue])
            }
            try database.close()
            // Bounded: on a regression this would wait six hours.
            let delivering = Task { await outbox.deliverAll() }
            #expect(
                await eventually { (try? outbox.items().allSatisfy { $0.state == .delivered }) == true },
                "\((try? outbox.items().map(\.state)) ?? [])")
            delivering.cancel()
            await delivering.value
        }
    }

    /// Retrying one item of a dead batch sends the batch again whole, with its body and key: the
    /// item went alone under the old batch's key with another body, a reused key to the server
    /// (which the Idempotency-Key draft has answered 422), so the retry could never succeed; and
    /// under a new key a server that had applied the batch would apply it again.
    @Test(arguments: TransportKind.allCases)
    func retryingAnItemOfADeadBatchSendsTheBatchAgainWhole(_ kind: TransportKind) async throws {
        let bodies = Locked<[String: Data]>([:])
        let api = IdempotentServer { request, _ in
            let key = request.header("idempotency-key") ?? ""
            let (known, first) = bodies.withLock { byKey -> (Data?, Bool) in
                let answer = (byKey[key], byKey.isEmpty)
                if byKey[key] == nil { byKey[key] = request.body }
                return answer
            }
            if let known, known != request.body { return .text("key reused with another body", status: 422) }
            // The first try fails (a 503, and its one attempt is spent), as an outage would.
            return first ? .text("busy", status: 503, headers: [("Retry-After", "0")]) : nil
        }
        let server = try await http1Server(api.respond)
        let configuration = Self.analyticsBatches(to: server)
        try await Self.withOutbox(kind, server: server, configuration: configuration) { outbox, _, _ in
            let ids = try (0..<3).map {
                try outbox.enqueue(Self.post("/events", #"{"e":\#($0)}"#), queue: "analytics", maxAttempts: 1)
            }
            await outbox.deliverAll()
            for id in ids { #expect(try outbox.item(id)?.state == .dead) }
            try outbox.retry(ids[1])
            await outbox.deliverAll()
            for id in ids {
                let item = try #require(try outbox.item(id))
                #expect(item.state == .delivered, "\(item.lastError ?? "")")
            }
            #expect(api.state.current.bodies.map { String(decoding: $0, as: UTF8.self) } == [#"[{"e":0},{"e":1},{"e":2}]"#])
            #expect(Set(api.state.current.seen).count == 1)
        }
    }

    /// Records, for each request started, its path and whether its name was its endpoint's own.
    final class NameMonitor: EventMonitor, Sendable {
        let seen = Locked<[String: Bool]>([:])
        func requestStarted(_ request: RequestEvent) {
            self.seen.withLock { $0[request.request.head.path ?? ""] = request.request.hasOwnName }
        }
    }

    @Test(arguments: TransportKind.allCases)
    func anUnnamedEndpointIsDeliveredUnnamedNotNamedByItsPath(_ kind: TransportKind) async throws {
        // The name made from an unnamed endpoint's method and path may hold ids: stored and then
        // given at delivery as the endpoint's own, it became one metrics label and one span name
        // per id. It is delivered unnamed, as it was enqueued; a named one keeps its name.
        let api = IdempotentServer()
        let server = try await http1Server(api.respond)
        let monitor = NameMonitor()
        try await Self.withOutbox(kind, server: server, configure: { $0.eventMonitors = [monitor] }) { outbox, _, _ in
            _ = try outbox.enqueue(
                Endpoint<Data>(
                    method: .post, path: "/users/123/messages", body: .data(Data("{}".utf8), contentType: "application/json"),
                    decoding: .data))
            _ = try outbox.enqueue(Self.post("/messages"))
            await outbox.deliverAll()
            #expect(monitor.seen.withLock { $0 } == ["/users/123/messages": false, "/messages": true])
        }
    }

    /// Three items of the "analytics" queue as a batch sent once before under `batch-sent` left
    /// them (a 503, or a crash): pending, attempted once, with that batch id. `expired` puts that
    /// one's expiry in the past.
    static func batchSentBefore(at path: String, baseURL: URL, expired: Int?) async throws -> [OutboxItemID] {
        let idle = Client(configuration: .init(transport: StubTransport { _ in .status(.ok) }, baseURL: baseURL) { $0.debugOptions = .off })
        let writer = try Outbox(path: path, client: idle)
        let ids = try (0..<3).map { try writer.enqueue(Self.post("/events", #"{"e":\#($0)}"#), queue: "analytics") }
        let database = try DatabaseQueue(path: path)
        try await database.write { db in
            try db.execute(sql: "UPDATE item SET batch = 'batch-sent', attempts = 1 WHERE queue = 'analytics'")
            if let expired { try db.execute(sql: "UPDATE item SET expires_at = 1 WHERE id = ?", arguments: [ids[expired].rawValue]) }
        }
        try database.close()
        return ids
    }

    /// The fast configuration with the "analytics" queue batched three at a time to `/events`.
    static func analyticsBatches(to server: TestServer) -> Outbox.Configuration {
        var configuration = Self.fast
        configuration.batches["analytics"] = .jsonArray(
            maxCount: 3, maxAge: .milliseconds(10), url: server.baseURL.absoluteString + "/events")
        return configuration
    }

    /// Another connection to the outbox file at `path` with a trigger (`refuse`, dropped by the
    /// caller) that makes every write marking an item delivered fail, as a full disk would. It
    /// waits for the outbox's own writes rather than fail beside them.
    static func refusingDeliveredRecords(at path: String) async throws -> DatabaseQueue {
        var waiting = GRDB.Configuration()
        waiting.busyMode = .timeout(30)
        let other = try DatabaseQueue(path: path, configuration: waiting)
        try await other.write { db in
            try db.execute(
                sql: """
                    CREATE TRIGGER refuse BEFORE UPDATE OF state ON item WHEN NEW.state = 'delivered'
                    BEGIN SELECT RAISE(ABORT, 'disk full'); END
                    """)
        }
        return other
    }

    /// Runs one statement on the outbox file at `path` about item `id`, as another program would.
    static func alter(_ path: String, _ sql: String, item id: OutboxItemID) async throws {
        let database = try DatabaseQueue(path: path)
        try await database.write { db in try db.execute(sql: sql, arguments: [id.rawValue]) }
        try database.close()
    }

    /// A batch sent before, found by an outbox that has no batch rule for its queue (the rule
    /// removed or renamed in an update, or the command-line tool, which knows none): its items
    /// are not sent one by one under new keys (the server may have applied the batch, and would
    /// apply each again); they are dead, with the reason, for the app to see and retry once the
    /// rule is back.
    @Test(arguments: TransportKind.allCases)
    func aBatchSentBeforeIsNotSplitWhenTheRuleIsGone(_ kind: TransportKind) async throws {
        let api = IdempotentServer()
        let server = try await http1Server(api.respond)
        let path = Self.databasePath()
        let ids = try await Self.batchSentBefore(at: path, baseURL: server.baseURL, expired: nil)
        try await Self.withOutbox(kind, server: server, path: path, configuration: Self.fast) { outbox, _, _ in
            await outbox.deliverAll()
            #expect(api.state.current.seen.isEmpty, "\(api.state.current.seen)")
            for id in ids {
                let item = try outbox.item(id)
                #expect(item?.state == .dead)
                #expect(item?.lastError?.contains("batch") == true, "\(String(describing: item?.lastError))")
            }
        }
    }

    /// An item that expired while it waited for its batch is not sent in it (its `expiresAfter`
    /// says it is not sent any more); it is dead, and the others go. It was sent and delivered.
    @Test(arguments: TransportKind.allCases)
    func anExpiredItemIsLeftOutOfANewBatch(_ kind: TransportKind) async throws {
        let api = IdempotentServer()
        let server = try await http1Server(api.respond)
        let path = Self.databasePath()
        try await Self.withOutbox(kind, server: server, path: path, configuration: Self.analyticsBatches(to: server)) { outbox, _, _ in
            let kept = try outbox.enqueue(Self.post("/events", #"{"e":0}"#), queue: "analytics")
            let lapsed = try outbox.enqueue(Self.post("/events", #"{"e":1}"#), queue: "analytics", expiresAfter: .seconds(3600))
            let last = try outbox.enqueue(Self.post("/events", #"{"e":2}"#), queue: "analytics")
            // Expired since it was enqueued, as another program (or time) would have it.
            try await Self.alter(path, "UPDATE item SET expires_at = 1 WHERE id = ?", item: lapsed)
            await outbox.deliverAll()
            #expect(try outbox.item(kept)?.state == .delivered)
            #expect(try outbox.item(last)?.state == .delivered)
            let dead = try outbox.item(lapsed)
            #expect(dead?.state == .dead)
            #expect(dead?.lastError?.contains("expired") == true, "\(String(describing: dead?.lastError))")
            let bodies = api.state.current.bodies.map { String(decoding: $0, as: UTF8.self) }
            #expect(bodies == [#"[{"e":0},{"e":2}]"#])
        }
    }

    /// An outcome recorded late (the file refused it at first) does not undo what happened to
    /// the item since: here another program on the file (a recovering opener, the command-line
    /// tool) finished it meanwhile. The late write changes only items still in flight.
    @Test(arguments: TransportKind.allCases)
    func aLateRecordDoesNotUndoWhatHappenedSince(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        try await Self.withOutbox(kind, server: server) { outbox, _, path in
            let id = try outbox.enqueue(Self.post("/echo"), queue: "q")
            let other = try await Self.refusingDeliveredRecords(at: path)
            outbox.start()
            #expect(await eventually { outbox.writeFailures.current.count >= 1 })
            await outbox.stop()
            try await other.write { db in
                try db.execute(sql: "DROP TRIGGER refuse")
                try db.execute(
                    sql: "UPDATE item SET state = 'dead', last_error = 'finished by another program', finished_at = 1 WHERE id = ?",
                    arguments: [id.rawValue])
            }
            try other.close()
            let later = try outbox.enqueue(Self.post("/echo"), queue: "q")
            outbox.start()
            #expect(await eventually { (try? outbox.item(later))??.state == .delivered })
            let item = try #require(try outbox.item(id))
            #expect(item.state == .dead)
            #expect(item.lastError == "finished by another program")
            #expect(item.result == nil)
        }
    }

    /// A file with no room for a response body (full, or over a quota) refuses the write that
    /// records the delivery every time: the item is recorded delivered without the body (its
    /// status and fields kept, the reason in its error), rather than left in flight; the other
    /// queues go on meanwhile, and `deliverAll` returns.
    @Test(arguments: TransportKind.allCases)
    func aResultBodyTheFileHasNoRoomForIsLeftOutNotTheDelivery(_ kind: TransportKind) async throws {
        let server = try await http1Server { request in
            request.path == "/big" ? ScriptedResponse(status: 200, body: Data(repeating: 0x61, count: 200 << 10)) : .json("{}")
        }
        var configuration = Self.fast
        configuration.pragmas = ["PRAGMA max_page_count = 16"]
        try await Self.withOutbox(kind, server: server, configuration: configuration) { outbox, _, _ in
            let big = try outbox.enqueue(Self.post("/big"), queue: "a")
            let small = try outbox.enqueue(Self.post("/small"), queue: "b")
            await outbox.deliverAll()
            let item = try #require(try outbox.item(big))
            #expect(item.state == .delivered)
            #expect(item.result?.status == 200)
            #expect(item.result?.body.isEmpty == true)
            #expect(item.lastError?.contains("could not be stored") == true, "\(String(describing: item.lastError))")
            #expect(try outbox.item(small)?.state == .delivered)
            #expect(try outbox.item(small)?.result?.body == Data("{}".utf8))
            #expect(outbox.writeFailures.current.count >= 1)
            #expect(server.requests.filter { $0.path == "/big" }.count == 1)
        }
    }

    /// Expired items do not make a batch full: they are dead, and the live items wait for a
    /// full batch (or their age) as if the expired ones had never been enqueued, rather than
    /// go at once in a batch of one.
    @Test(arguments: TransportKind.allCases)
    func expiredItemsDoNotFillABatch(_ kind: TransportKind) async throws {
        let api = IdempotentServer()
        let server = try await http1Server(api.respond)
        let path = Self.databasePath()
        var configuration = Self.fast
        configuration.batches["analytics"] = .jsonArray(maxCount: 3, maxAge: .seconds(3600), url: server.baseURL.absoluteString + "/events")
        try await Self.withOutbox(kind, server: server, path: path, configuration: configuration) { outbox, _, _ in
            let kept = try outbox.enqueue(Self.post("/events", #"{"e":0}"#), queue: "analytics")
            let lapsed = try (1...2).map {
                try outbox.enqueue(Self.post("/events", #"{"e":\#($0)}"#), queue: "analytics", expiresAfter: .seconds(3600))
            }
            for id in lapsed { try await Self.alter(path, "UPDATE item SET expires_at = 1 WHERE id = ?", item: id) }
            outbox.start()
            #expect(await eventually { lapsed.allSatisfy { (try? outbox.item($0))??.state == .dead } })
            let more = try (3...4).map { try outbox.enqueue(Self.post("/events", #"{"e":\#($0)}"#), queue: "analytics") }
            #expect(await eventually { (try? outbox.item(more[1]))??.state == .delivered })
            #expect(try outbox.item(kept)?.state == .delivered)
            let bodies = api.state.current.bodies.map { String(decoding: $0, as: UTF8.self) }
            #expect(bodies == [#"[{"e":0},{"e":3},{"e":4}]"#])
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aBatchSentBeforeKeepsItsItemsAndKeyWhenTheRuleNowAllowsFewer(_ kind: TransportKind) async throws {
        // An update lowered `maxCount` from 3 to 2 while a batch of 3 waited for its retry: it
        // goes again whole, under the key it was sent with (the server may have applied it),
        // not as [a, b] under a new key and then [c].
        let api = IdempotentServer()
        let server = try await http1Server(api.respond)
        let path = Self.databasePath()
        let ids = try await Self.batchSentBefore(at: path, baseURL: server.baseURL, expired: nil)
        var configuration = Self.fast
        configuration.batches["analytics"] = .jsonArray(
            maxCount: 2, maxAge: .milliseconds(10), url: server.baseURL.absoluteString + "/events")
        try await Self.withOutbox(kind, server: server, path: path, configuration: configuration) { outbox, _, _ in
            await outbox.deliverAll()
            #expect(api.state.current.seen == ["batch-sent"])
            #expect(api.state.current.bodies.map { String(decoding: $0, as: UTF8.self) } == [#"[{"e":0},{"e":1},{"e":2}]"#])
            let states = try ids.map { try outbox.item($0)?.state }
            #expect(states == [.delivered, .delivered, .delivered])
        }
    }

    @Test(arguments: TransportKind.allCases, [0, 2])
    func anExpiredItemOfABatchSentBeforeTakesItsBatchWithIt(_ kind: TransportKind, _ expired: Int) async throws {
        // An item of a batch that was sent (and maybe applied) expires before the retry — the
        // first or a later one: the others, sent again without it, would make a new batch under
        // a new key, applied a second time. The batch ends whole, dead, and nothing more is sent.
        let api = IdempotentServer()
        let server = try await http1Server(api.respond)
        let path = Self.databasePath()
        let ids = try await Self.batchSentBefore(at: path, baseURL: server.baseURL, expired: expired)
        let configuration = Self.analyticsBatches(to: server)
        try await Self.withOutbox(kind, server: server, path: path, configuration: configuration) { outbox, _, _ in
            await outbox.deliverAll()
            #expect(api.state.current.seen.isEmpty)
            for id in ids {
                let item = try #require(try outbox.item(id))
                #expect(item.state == .dead)
                #expect(item.lastError?.contains("expired before it could be delivered") == true)
            }
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aBatchSentBeforeWithAnUnreadableItemIsHeldWhole(_ kind: TransportKind) async throws {
        // The third item of a batch sent before cannot be read: the batch goes whole or not at
        // all, so nothing is sent, and `deliverAll` returns (it looked for the batch's items
        // again and again).
        let api = IdempotentServer()
        let server = try await http1Server(api.respond)
        let path = Self.databasePath()
        let ids = try await Self.batchSentBefore(at: path, baseURL: server.baseURL, expired: nil)
        try await Self.alter(path, "UPDATE item SET method = 'GE T' WHERE id = ?", item: ids[2])
        let configuration = Self.analyticsBatches(to: server)
        try await Self.withOutbox(kind, server: server, path: path, configuration: configuration) { outbox, _, _ in
            await outbox.deliverAll()
            #expect(api.state.current.seen.isEmpty)
            let first = try outbox.item(ids[0])
            #expect(first?.state == .pending)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func anItemRevivedAheadOfABatchSentBeforeGoesWithoutIt(_ kind: TransportKind) async throws {
        // Item 0 died on its own (expired, `retry` revived it: no batch); items 1 and 2 were sent
        // as a batch that failed (the server may have applied it). Item 0 goes alone under a new
        // key, then 1 and 2 together under theirs — never [0, 1, 2] under a new key, which would
        // apply 1 and 2 twice.
        let api = IdempotentServer()
        let server = try await http1Server(api.respond)
        let path = Self.databasePath()
        let ids = try await Self.batchSentBefore(at: path, baseURL: server.baseURL, expired: nil)
        try await Self.alter(path, "UPDATE item SET batch = NULL, attempts = 0 WHERE id = ?", item: ids[0])
        let configuration = Self.analyticsBatches(to: server)
        try await Self.withOutbox(kind, server: server, path: path, configuration: configuration) { outbox, _, _ in
            await outbox.deliverAll()
            let state = api.state.current
            #expect(state.bodies.map { String(decoding: $0, as: UTF8.self) } == [#"[{"e":0}]"#, #"[{"e":1},{"e":2}]"#])
            #expect(state.seen.count == 2)
            #expect(state.seen.first != "batch-sent")
            #expect(state.seen.last == "batch-sent")
            let states = try ids.map { try outbox.item($0)?.state }
            #expect(states == [.delivered, .delivered, .delivered])
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aBatchIsSentAgainWithItsOwnItemsEvenWhenMoreWereEnqueuedMeanwhile(_ kind: TransportKind) async throws {
        // The first send of [a, b] fails (503); c is enqueued before the retry. The retry is
        // [a, b] under the same key (the server may have applied it), and c goes in a batch of
        // its own — never [a, b, c] under a new key, which would apply a and b twice.
        let api = IdempotentServer { _, count in count == 1 ? .text("busy", status: 503, headers: [("Retry-After", "0")]) : nil }
        let server = try await http1Server(api.respond)
        let configuration = Self.analyticsBatches(to: server)
        try await Self.withOutbox(kind, server: server, configuration: configuration) { outbox, _, _ in
            let first = try (0..<2).map { try outbox.enqueue(Self.post("/events", #"{"e":\#($0)}"#), queue: "analytics") }
            // Only the first attempt: the batch of two goes out and fails.
            outbox.start()
            #expect(await eventually { api.state.current.seen.count >= 1 })
            await outbox.stop()
            let third = try outbox.enqueue(Self.post("/events", #"{"e":2}"#), queue: "analytics")
            await outbox.deliverAll()
            let state = api.state.current
            // Every send of the first batch carries its key (how many depends on when the
            // background loop stopped); the third item went under a key of its own (twice: the
            // server answers each key's first request with 503).
            #expect(Set(state.seen).count == 2)
            #expect(state.seen.filter { $0 != state.seen[0] }.count == 2)
            #expect(state.seen.last != state.seen[0])
            #expect(state.applied.count == 2)
            let bodies = state.bodies.map { String(decoding: $0, as: UTF8.self) }
            #expect(
                bodies.first?.contains(#""e":0"#) == true && bodies.first?.contains(#""e":1"#) == true
                    && bodies.first?.contains(#""e":2"#) == false)
            #expect(try outbox.item(third)?.state == .delivered)
            #expect(try first.allSatisfy { try outbox.item($0)?.state == .delivered })
        }
    }

    /// The write that records a delivery fails (a full disk, a lock held past the busy timeout,
    /// a file the device's lock made unwritable): the item is not left in flight, holding its
    /// queue until the outbox is opened again (and sent again then); the write is tried again —
    /// after the delivery was stopped and started again too — and once the file takes it the
    /// item is delivered, once, and the next item of its queue goes.
    @Test(arguments: TransportKind.allCases)
    func aDeliveryWhoseRecordFailsIsRecordedOnceTheFileTakesIt(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        try await Self.withOutbox(kind, server: server) { outbox, _, path in
            let first = try outbox.enqueue(Self.post("/echo"), queue: "q")
            let other = try await Self.refusingDeliveredRecords(at: path)
            outbox.start()
            #expect(await eventually { outbox.writeFailures.current.count >= 2 })
            #expect(server.requests.count == 1)
            #expect(try outbox.item(first)?.state == .inFlight)
            await outbox.stop()
            try await other.write { db in try db.execute(sql: "DROP TRIGGER refuse") }
            try other.close()
            let second = try outbox.enqueue(Self.post("/echo"), queue: "q")
            outbox.start()
            #expect(await eventually { (try? outbox.item(second))??.state == .delivered })
            #expect(try outbox.item(first)?.state == .delivered)
            #expect(try outbox.item(first)?.result?.status == 200)
            // Refused for another reason than a full file: recorded with its body.
            #expect(try outbox.item(first)?.result?.body.isEmpty == false)
            #expect(server.requests.count == 2)
        }
    }
}
