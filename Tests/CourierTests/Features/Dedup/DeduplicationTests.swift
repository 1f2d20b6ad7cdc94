import Courier
import CourierTestServer
import Foundation
import Testing

@Suite("Deduplication: identical in-flight requests share one network request")
struct DeduplicationTests {
    @Test(arguments: TransportKind.allCases)
    func callsWhoseEndpointsRetryDifferentlyAreNotShared(_ kind: TransportKind) async throws {
        // The shared exchange retries as its first caller's endpoint says: a caller whose policy
        // retries a 503 would get it unretried, one that never retries would wait through the
        // other's backoff. Such calls go on their own; calls with one policy still share.
        let gate = Gate()
        let server = try await trafficServer(gate: gate)
        try await withClient(kind, server: server) { client in
            let never = client.start(Endpoint<Article>(path: "/slow/policy").retry(.never))
            let standard = client.start(Endpoint<Article>(path: "/slow/policy"))
            let alike = client.start(Endpoint<Article>(path: "/slow/policy"))
            #expect(await eventually { client.deduplicationCounts.coalesced == 1 && server.requests.count == 2 })
            await gate.open()
            for handle in [never, standard, alike] {
                let article = try await handle.value
                #expect(article.title == "/slow/policy")
            }
            #expect(server.requests.count == 2)
            #expect(client.deduplicationCounts.coalesced == 1)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aRequestThatLeavesHomeIsNotSharedWithTheSameRequestAtHome(_ kind: TransportKind) async throws {
        // The OAuth2 authenticator (client middleware, below deduplication) sends its token only
        // to the request's home. The same URL asked for by a service whose home is elsewhere goes
        // without it: shared, one caller would get an answer made with the other's credentials,
        // or a 401 for the token it was owed. (Was shared: the key left out where it goes.)
        let gate = Gate()
        let api = try await http1Server { request in
            await gate.wait()
            return await Routes.standard(request)
        }
        let other = try await http1Server()
        let servers = ServerDirectory(
            urls: ["api": [.develop: api.baseURL], "cdn": [.develop: other.baseURL]], buildDefault: .develop, isReleaseBuild: false,
            store: InMemoryEnvironmentStore())
        let auth = OAuth2Authenticator(
            tokenEndpoint: OAuth2TokenEndpoint(url: api.baseURL.appendingPathComponent("oauth/token"), clientID: "app"),
            tokenClient: Client(configuration: .init(transport: URLSessionTransport())),
            store: InMemoryCredentialStore(OAuth2Token(accessToken: "t-1", expiresAt: Date(timeIntervalSinceNow: 3600))))
        try await withClient(
            kind, server: api,
            configure: {
                $0.servers = servers
                $0.middleware = [auth]
            }
        ) { client in
            let away = client.start(Endpoint<Echo>(path: api.baseURL.absoluteString + "/echo").service("cdn"))
            #expect(await eventually { api.requests.count == 1 })
            let home = client.start(Endpoint<Echo>(path: "/echo").service("api"))
            #expect(await eventually { api.requests.count == 2 })
            await gate.open()
            let awayEcho = try await away.value
            let homeEcho = try await home.value
            #expect(awayEcho.headers["authorization"] == nil)
            #expect(homeEcho.headers["authorization"] == "Bearer t-1")
            #expect(client.deduplicationCounts.coalesced == 0)
        }
        try await other.stop()
    }

    @Test(arguments: TransportKind.allCases)
    func aJoinerWithAHigherTaskPriorityRaisesTheSharedRequests(_ kind: TransportKind) async throws {
        // The shared request runs in a task of its own, made in its first caller's task: it
        // takes that task's priority. A joiner waits on a continuation, which (unlike awaiting a
        // task's value) raises nothing: a request a background task started ran at background
        // priority for the user-initiated caller that joined it.
        let gate = Gate()
        let held = Locked(false)
        let seen = Locked<TaskPriority?>(nil)
        let probe = ClosureMiddleware { request, next in
            held.withLock { $0 = true }
            await gate.wait()
            seen.withLock { $0 = Task.currentPriority }
            return try await next(request)
        }
        let server = try await http1Server()
        let monitor = RecordingMonitor()
        try await withClient(
            kind, server: server,
            configure: {
                $0.middleware = [probe]
                $0.eventMonitors = [monitor]
            }
        ) { client in
            let endpoint = Endpoint<Article>(path: "/json")
            let first = Task(priority: .background) { try await client.send(endpoint) }
            #expect(await eventually { held.current })
            let joiner = Task(priority: .high) { try await client.send(endpoint) }
            // The join is announced once the shared request's priority was raised.
            #expect(await eventually { monitor.names.contains("joined") })
            await gate.open()
            #expect(try await joiner.value.id == 1)
            #expect(try await first.value.id == 1)
            let priority = try #require(seen.current)
            #if compiler(>=6.2)
            if #available(macOS 26.0, iOS 26.0, watchOS 26.0, tvOS 26.0, visionOS 26.0, *) {
                #expect(priority >= .high, "\(priority)")
            }
            #endif
            #expect(server.requests.count == 1)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func hundredIdenticalConcurrentGetsReachTheServerOnce(_ kind: TransportKind) async throws {
        let gate = Gate()
        let server = try await trafficServer(gate: gate)
        try await withClient(kind, server: server) { client in
            let handles = (0..<100).map { _ in client.start(Endpoint<Article>(path: "/slow/blocker")) }
            // The answer is held until every caller has joined, however slowly they come.
            #expect(await eventually { client.deduplicationCounts.coalesced == 99 })
            await gate.open()
            var sources: [ResponseSource] = []
            for handle in handles {
                let response = try await handle.response
                #expect(response.value.title == "/slow/blocker")
                sources.append(response.source)
            }
            #expect(server.requests.count == 1)
            #expect(sources.filter { $0 == .network }.count == 1)
            #expect(sources.filter { $0 == .coalesced }.count == 99)
            #expect(client.deduplicationCounts.coalesced == 99)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func cancellingNinetyNineLeavesTheLastOneServed(_ kind: TransportKind) async throws {
        let gate = Gate()
        let server = try await trafficServer(gate: gate)
        try await withClient(kind, server: server) { client in
            let handles = (0..<100).map { _ in client.start(Endpoint<Article>(path: "/slow/blocker")) }
            #expect(await eventually { server.requests.count == 1 })
            // Every caller has joined before any leaves: a caller still on its way when the others
            // have all left would rightly start the request anew (seen under ThreadSanitizer).
            #expect(await eventually { client.deduplicationCounts.coalesced == 99 })
            for handle in handles.dropLast() { handle.cancel() }
            for handle in handles.dropLast() {
                let error = await expectCourierError { _ = try await handle.value }
                #expect(error?.kind == .cancelled)
            }
            // Every cancelled waiter was released while the shared request was still on the wire.
            #expect(server.abandonedCount == 0)
            #expect(client.traffic.inFlight == 1)
            await gate.open()
            let last = try await handles.last!.value
            #expect(last.title == "/slow/blocker")
            #expect(server.requests.count == 1)
            #expect(server.abandonedCount == 0)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func cancellingAllHundredClosesTheRequestOnTheWire(_ kind: TransportKind) async throws {
        let server = try await trafficServer(delay: .seconds(600))
        try await withClient(kind, server: server) { client in
            let handles = (0..<100).map { _ in client.start(Endpoint<Article>(path: "/slow")) }
            #expect(await eventually { server.requests.count == 1 })
            for handle in handles { handle.cancel() }
            for handle in handles {
                let error = await expectCourierError { _ = try await handle.value }
                #expect(error?.kind == .cancelled)
            }
            #expect(await eventually { server.abandonedCount == 1 })
            #expect(server.requests.count == 1)
        }
    }

    /// Cancellation × deduplication: a caller already cancelled when it reaches the deduplication
    /// stage starts no shared request. (Found under load in the test above: callers cancelled
    /// before they arrived, after every waiter of the first request had left, each sent the
    /// request again.)
    @Test(arguments: TransportKind.allCases)
    func aCallerCancelledBeforeItArrivesStartsNoSharedRequest(_ kind: TransportKind) async throws {
        let server = try await trafficServer()
        try await withClient(kind, server: server) { client in
            let cancelled = Task {
                withUnsafeCurrentTask { $0?.cancel() }
                return try await client.send(Endpoint<Article>(path: "/slow"))
            }
            let error = await expectCourierError { _ = try await cancelled.value }
            #expect(error?.kind == .cancelled)
            #expect(client.deduplicationCounts.started == 0)
            // A shared request started for the cancelled caller would have reached the server
            // before this later one is answered on the same connection pool.
            _ = try await client.send(Endpoint<Article>(path: "/after"))
            #expect(server.requests.map(\.path) == ["/after"])
            #expect(client.deduplicationCounts.started == 1)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func postsAreNotSharedUnlessTheEndpointOptsInWithAKey(_ kind: TransportKind) async throws {
        let gate = Gate()
        let server = try await trafficServer(gate: gate)
        try await withClient(kind, server: server) { client in
            let plain = Endpoint<Article>(method: .post, path: "/slow/search", body: .json(["q": "swift"]))
            let unshared = (0..<5).map { _ in client.start(plain) }
            for handle in unshared { _ = try await handle.value }
            #expect(server.requests.count == 5)

            server.reset()
            // Held until every caller has joined, however slowly they come.
            let keyed = Endpoint<Article>(method: .post, path: "/slow/blocker-search", body: .json(["q": "swift"]))
                .deduplication(.key("search"))
            let shared = (0..<5).map { _ in client.start(keyed) }
            #expect(await eventually { client.deduplicationCounts.coalesced == 4 })
            await gate.open()
            for handle in shared { _ = try await handle.value }
            #expect(server.requests.count == 1)

            server.reset()
            let differentBodies = (0..<3).map {
                client.start(
                    Endpoint<Article>(method: .post, path: "/slow/search", body: .json(["q": "\($0)"])).deduplication(.key("search")))
            }
            for handle in differentBodies { _ = try await handle.value }
            #expect(server.requests.count == 3)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func requestsThatDifferInAVaryingHeaderOrQueryOrderAreHandledRight(_ kind: TransportKind) async throws {
        let server = try await trafficServer()
        try await withClient(kind, server: server) { client in
            let english = client.start(Endpoint<Article>(path: "/slow", headers: [.acceptLanguage: "en"]))
            let french = client.start(Endpoint<Article>(path: "/slow", headers: [.acceptLanguage: "fr"]))
            let ab = client.start(
                Endpoint<Article>(path: "/slow", query: [URLQueryItem(name: "a", value: "1"), URLQueryItem(name: "b", value: "2")]))
            let ba = client.start(
                Endpoint<Article>(path: "/slow", query: [URLQueryItem(name: "b", value: "2"), URLQueryItem(name: "a", value: "1")]))
            for handle in [english, french, ab, ba] { _ = try await handle.value }
            // en and fr are two requests; ?a&b and ?b&a are two as well: two target URIs
            // (RFC 3986 §6 does not make a reordered query the same URI), which a server may
            // answer differently. Identical ones are one (hundredIdenticalConcurrentGetsReachTheServerOnce).
            #expect(server.requests.count == 4)
            #expect(Set(server.requests.map(\.uri)) == ["/slow", "/slow?a=1&b=2", "/slow?b=2&a=1"])
        }
    }

    @Test(arguments: TransportKind.allCases)
    func sharedRequestRunsAtTheHighestWaitersPriority(_ kind: TransportKind) async throws {
        let gate = Gate()
        let server = try await trafficServer(gate: gate)
        // No ageing: on a loaded machine the waits below can take seconds, and a queued request would climb levels.
        try await withClient(
            kind, server: server, configure: { $0.scheduling = .init(maxConcurrentRequests: 1, agingInterval: .seconds(3600)) }
        ) { client in
            let blocker = client.start(Endpoint<Article>(path: "/slow/blocker"))
            #expect(await eventually { server.requests.count == 1 })
            let normal = client.start(Endpoint<Article>(path: "/normal"))
            let lowShared = client.start(Endpoint<Article>(path: "/shared"), priority: .low)
            #expect(await eventually { client.traffic.queued == 2 })
            // A second waiter joins the low request at veryHigh: the shared request overtakes /normal.
            let urgentShared = client.start(Endpoint<Article>(path: "/shared"), priority: .veryHigh)
            #expect(await eventually { client.deduplicationCounts.coalesced == 1 })
            await gate.open()
            for handle in [blocker, normal, lowShared, urgentShared] { _ = try await handle.value }
            #expect(server.requests.map(\.path) == ["/slow/blocker", "/shared", "/normal"])
        }
    }

    /// Handles of a suspended client with one slot held by `/slow/blocker` (on the wire, held at
    /// `gate`): `/normal` queued, and `/shared` started at low then joined at very high, which
    /// raised the shared request (queued once, at very high).
    struct RaisedShare {
        let blocker: RequestHandle<Article>
        let normal: RequestHandle<Article>
        let lowShared: RequestHandle<Article>
        let urgentShared: RequestHandle<Article>
    }

    func withARaisedShare(
        _ kind: TransportKind, _ body: (Client, TestServer, Gate, RaisedShare) async throws -> Void
    ) async throws {
        let gate = Gate()
        let server = try await trafficServer(gate: gate)
        try await withClient(
            kind, server: server, configure: { $0.scheduling = .init(maxConcurrentRequests: 1, agingInterval: .seconds(3600)) }
        ) { client in
            let blocker = client.start(Endpoint<Article>(path: "/slow/blocker"))
            #expect(await eventually { server.requests.count == 1 })
            client.suspend()
            let normal = client.start(Endpoint<Article>(path: "/normal"))
            let lowShared = client.start(Endpoint<Article>(path: "/shared"), priority: .low)
            let urgentShared = client.start(Endpoint<Article>(path: "/shared"), priority: .veryHigh)
            #expect(await eventually { client.deduplicationCounts.coalesced == 1 })
            #expect(await eventually { client.traffic.queued == 2 && client.traffic.queuedByPriority[.veryHigh] == 1 })
            try await body(
                client, server, gate, RaisedShare(blocker: blocker, normal: normal, lowShared: lowShared, urgentShared: urgentShared))
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aWaitersPriorityRaisesASharedRequestHeldBySuspension(_ kind: TransportKind) async throws {
        // The client is suspended, so the shared request waits in the scheduler's queue (at low)
        // when the urgent caller joins it: it leaves at the raised priority on `resume()`. (A
        // join in the moment before the ticket is queued: `SchedulerTests`, the first test.)
        try await self.withARaisedShare(kind) { client, server, gate, share in
            client.resume()
            await gate.open()
            for handle in [share.blocker, share.normal, share.lowShared, share.urgentShared] { _ = try await handle.value }
            #expect(server.requests.map(\.path) == ["/slow/blocker", "/shared", "/normal"])
        }
    }

    /// The shared request runs at the highest priority among its *remaining* waiters: when the
    /// urgent caller that raised it leaves, it queues at low again, behind `/normal`.
    @Test(arguments: TransportKind.allCases)
    func aSharedRequestDropsBackWhenTheWaiterThatRaisedItLeaves(_ kind: TransportKind) async throws {
        try await self.withARaisedShare(kind) { client, server, gate, share in
            share.urgentShared.cancel()
            _ = await expectCourierError { _ = try await share.urgentShared.value }
            #expect(await eventually { client.traffic.queuedByPriority == [.low: 1, .normal: 1] })
            client.resume()
            await gate.open()
            for handle in [share.blocker, share.normal, share.lowShared] { _ = try await handle.value }
            #expect(server.requests.map(\.path) == ["/slow/blocker", "/normal", "/shared"])
        }
    }

    /// Seam: deduplication × a middleware that sends twice. Middleware runs below the
    /// deduplication stage, inside the shared request: a caller that joins while the middleware's
    /// second send is on the wire gets what the middleware returned (the second answer), and the
    /// server sees the middleware's two sends, no more.
    @Test(arguments: TransportKind.allCases)
    func aCallerJoiningAMiddlewaresSecondSendGetsWhatTheMiddlewareReturned(_ kind: TransportKind) async throws {
        let gate = Gate()
        let server = try await http1Server(numbering: { _, number in
            if number == 2 { await gate.wait() }
            return .json(#"{"id":\#(number),"title":"send \#(number)"}"#)
        })
        let twice = ClosureMiddleware { request, next in
            let first = try await next(request)
            _ = try await first.body.collect(upTo: 1 << 20)
            return try await next(request)
        }
        try await withClient(kind, server: server, configure: { $0.middleware = [twice] }) { client in
            let endpoint = Endpoint<Article>(path: "/twice")
            let leader = client.start(endpoint)
            #expect(await eventually { server.requests.count == 2 })
            let joiner = client.start(endpoint)
            #expect(await eventually { client.deduplicationCounts.coalesced == 1 })
            await gate.open()
            let led = try await leader.response
            let joined = try await joiner.response
            #expect(led.value == Article(id: 2, title: "send 2"))
            #expect(joined.value == Article(id: 2, title: "send 2"))
            #expect(led.source == .network)
            #expect(joined.source == .coalesced)
            #expect(server.requests.count == 2)
        }
    }
}

extension DeduplicationTests {
    /// Callers held in their join event. A hold blocks a thread of the shared pool, so these run
    /// one at a time: two holds at once on a two-core machine leave no thread to answer them.
    @Suite("Deduplication: callers still joining when an answer comes", .serialized)
    struct WhileJoining {
        /// How the joining caller's request ended, waited for as a state (`nil` when it has not
        /// ended in time): an answer kept for it and never handed over would hold it forever.
        static func end(of joiner: RequestHandle<Article>) async -> Result<Response<Article>, any Error>? {
            let outcome = Locked<Result<Response<Article>, any Error>?>(nil)
            Task {
                let result: Result<Response<Article>, any Error>
                do { result = .success(try await joiner.response) } catch { result = .failure(error) }
                outcome.withLock { $0 = result }
            }
            _ = await eventually { outcome.withLock { $0 != nil } }
            return outcome.current
        }

        /// A caller that joins a shared request is told so (`deduplicationJoined`) while it still
        /// sets up its wait. When the shared request ends in that moment, its answer is kept for the
        /// caller, which takes it once set up: it gets the first caller's answer, from one request.
        /// (Before, the answer resumed the caller from the other thread before it awaited: allowed,
        /// but unmarked for ThreadSanitizer, which reported the caller's next write to its own frame
        /// as a data race. `scripts/tsan.sh` runs this suite.)
        @Test(arguments: TransportKind.allCases)
        func anAnswerThatComesWhileACallerIsStillJoiningReachesIt(_ kind: TransportKind) async throws {
            let gate = Gate()
            let server = try await trafficServer(gate: gate)
            let holder = JoinHolder()
            try await withClient(kind, server: server, configure: { $0.eventMonitors = [holder] }) { client in
                let first = client.start(Endpoint<Article>(path: "/slow/blocker"))
                #expect(await eventually { server.requests.count == 1 })
                let joiner = client.start(Endpoint<Article>(path: "/slow/blocker"))
                #expect(await eventually { holder.hasEntered })
                await gate.open()
                // The shared request has ended once the first caller has its answer.
                let answer = try await first.response
                holder.release()
                let outcome = await Self.end(of: joiner)
                #expect(outcome != nil, "the joining caller never got the answer kept for it")
                guard let joined = try outcome?.get() else { return }
                #expect(answer.source == .network)
                #expect(joined.source == .coalesced)
                #expect(joined.value.title == answer.value.title)
                #expect(server.requests.count == 1)
                #expect(!holder.waitTimedOut)
            }
        }

        /// Cancellation × a caller still joining: the joining caller, held in its join event, is
        /// cancelled. Its end is kept for it like an answer: it ends with kind `cancelled` once let
        /// go, and the shared request goes on for the first caller, which gets its answer.
        @Test(arguments: TransportKind.allCases)
        func aCallerCancelledWhileStillJoiningEndsCancelledAndTheSharedRequestGoesOn(_ kind: TransportKind) async throws {
            let gate = Gate()
            let server = try await trafficServer(gate: gate)
            let holder = JoinHolder()
            try await withClient(kind, server: server, configure: { $0.eventMonitors = [holder] }) { client in
                let first = client.start(Endpoint<Article>(path: "/slow/blocker"))
                #expect(await eventually { server.requests.count == 1 })
                let joiner = client.start(Endpoint<Article>(path: "/slow/blocker"))
                #expect(await eventually { holder.hasEntered })
                // Its cancellation handler runs here, on this thread, while it is still held.
                joiner.cancel()
                holder.release()
                let outcome = await Self.end(of: joiner)
                #expect(outcome != nil, "the joining caller never got the end kept for it")
                #expect((outcome?.failure as? CourierError)?.kind == .cancelled)
                // The first caller was not cancelled with it: its request is still on the wire.
                #expect(server.abandonedCount == 0)
                await gate.open()
                let answer = try await first.response
                #expect(answer.source == .network)
                #expect(answer.value.title == "/slow/blocker")
                #expect(server.requests.count == 1)
                #expect(server.abandonedCount == 0)
                #expect(!holder.waitTimedOut)
            }
        }
    }
}

/// Holds a caller that joins a shared request inside its `deduplicationJoined` event (told while
/// it still sets up its wait) until ``release()``.
final class JoinHolder: EventMonitor {
    private let entered = Locked(false)
    private let timedOut = Locked(false)
    private let released = DispatchSemaphore(value: 0)
    var hasEntered: Bool { self.entered.withLock { $0 } }
    /// Whether the hold ended by its own bound (a minute) instead of by ``release()``.
    var waitTimedOut: Bool { self.timedOut.withLock { $0 } }

    func deduplicationJoined(_ request: RequestEvent, sharing: RequestID) {
        self.entered.withLock { $0 = true }
        if self.released.wait(timeout: .now() + 60) == .timedOut { self.timedOut.withLock { $0 = true } }
    }

    func release() { self.released.signal() }
}
