import Courier
import CourierTestServer
import Foundation
import Testing

/// A server whose `/slow` answers after `delay`, `/slow/blocker` when `gate` opens (if given),
/// and every other path at once, echoing the path.
func trafficServer(delay: Duration = .milliseconds(1500), gate: Gate? = nil) async throws -> TestServer {
    try await http1Server { request in
        let body = #"{"id":\#(request.uri.count),"title":"\#(request.uri)"}"#
        if request.path.hasPrefix("/slow/blocker"), let gate {
            await gate.wait()
            return .json(body)
        }
        if request.path.hasPrefix("/slow") {
            return .json(body).with(.stall(delay))
        }
        return .json(body)
    }
}

@Suite("Deduplication: identical in-flight requests share one network request")
struct DeduplicationTests {
    @Test(arguments: TransportKind.allCases)
    func hundredIdenticalConcurrentGetsReachTheServerOnce(_ kind: TransportKind) async throws {
        let server = try await trafficServer()
        try await withClient(kind, server: server) { client in
            let handles = (0..<100).map { _ in client.start(Endpoint<Article>(path: "/slow")) }
            var sources: [ResponseSource] = []
            for handle in handles {
                let response = try await handle.response
                #expect(response.value.title == "/slow")
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
        let server = try await trafficServer(delay: .seconds(5))
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

    @Test(arguments: TransportKind.allCases)
    func postsAreNotSharedUnlessTheEndpointOptsInWithAKey(_ kind: TransportKind) async throws {
        let server = try await trafficServer()
        try await withClient(kind, server: server) { client in
            let plain = Endpoint<Article>(method: .post, path: "/slow/search", body: .json(["q": "swift"]))
            let unshared = (0..<5).map { _ in client.start(plain) }
            for handle in unshared { _ = try await handle.value }
            #expect(server.requests.count == 5)

            server.reset()
            let keyed = plain.deduplication(.key("search"))
            let shared = (0..<5).map { _ in client.start(keyed) }
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

    @Test(arguments: TransportKind.allCases)
    func aWaitersPriorityCountsEvenWhenItJoinsBeforeTheSharedRequestIsQueued(_ kind: TransportKind) async throws {
        // The client is suspended, so the shared request waits before the scheduler when the
        // urgent caller joins it: the raise must still be the priority it queues with.
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
            #expect(client.traffic.queued == 0)
            client.resume()
            #expect(await eventually { client.traffic.queued == 2 })
            #expect(client.traffic.queuedByPriority[.veryHigh] == 1)
            await gate.open()
            for handle in [blocker, normal, lowShared, urgentShared] { _ = try await handle.value }
            #expect(server.requests.map(\.path) == ["/slow/blocker", "/shared", "/normal"])
        }
    }
}

@Suite("Scheduler: priorities, limits, re-prioritising and cancelling while queued")
struct SchedulerTests {
    @Test(arguments: TransportKind.allCases)
    func withOneSlotTheServerSeesRequestsInPriorityOrder(_ kind: TransportKind) async throws {
        let gate = Gate()
        let server = try await trafficServer(gate: gate)
        // No ageing: on a loaded machine the waits below can take seconds, and a queued request would climb levels.
        try await withClient(
            kind, server: server, configure: { $0.scheduling = .init(maxConcurrentRequests: 1, agingInterval: .seconds(3600)) }
        ) { client in
            let blocker = client.start(Endpoint<Article>(path: "/slow/blocker"))
            #expect(await eventually { server.requests.count == 1 })
            let order: [RequestPriority] = [.low, .high, .veryLow, .veryHigh, .normal, .high]
            var handles: [RequestHandle<Article>] = []
            for (index, priority) in order.enumerated() {
                handles.append(client.start(Endpoint<Article>(path: "/p/\(index)-\(priority)"), priority: priority))
                // Queued one at a time, so FIFO within a priority is not the tasks' race.
                #expect(await eventually { client.traffic.queued == index + 1 })
            }
            #expect(await eventually { client.traffic.queued == 6 })
            #expect(client.traffic.inFlight == 1)
            #expect(client.traffic.queuedByPriority[.high] == 2)
            await gate.open()
            _ = try await blocker.value
            for handle in handles { _ = try await handle.value }
            #expect(
                server.requests.dropFirst().map(\.path) == [
                    "/p/3-veryHigh", "/p/1-high", "/p/5-high", "/p/4-normal", "/p/0-low", "/p/2-veryLow",
                ])
        }
    }

    /// Requests started one after the other at one priority reach the wire in the order they were
    /// started, however their tasks happen to reach the scheduler: each is numbered when
    /// `start` is called, and the queue orders by priority, then by that number. Deduplication is
    /// on (the default), so the number also survives the shared exchange the scheduler sees.
    /// (Before: a task per `start` reached the queue in any order, and 20 requests went out of
    /// order in each of three runs.)
    @Test(arguments: TransportKind.allCases)
    func requestsStartedInOrderLeaveInOrder(_ kind: TransportKind) async throws {
        let gate = Gate()
        let server = try await trafficServer(gate: gate)
        try await withClient(
            kind, server: server, configure: { $0.scheduling = .init(maxConcurrentRequests: 1, agingInterval: .seconds(3600)) }
        ) { client in
            let blocker = client.start(Endpoint<Article>(path: "/slow/blocker"))
            #expect(await eventually { server.requests.count == 1 })
            // Started back to back, without waiting for each to queue.
            let handles = (0..<20).map { client.start(Endpoint<Article>(path: "/p/\($0)")) }
            #expect(await eventually { client.traffic.queued == 20 })
            await gate.open()
            _ = try await blocker.value
            for handle in handles { _ = try await handle.value }
            #expect(server.requests.dropFirst().map(\.path) == (0..<20).map { "/p/\($0)" })
        }
    }

    @Test(arguments: TransportKind.allCases)
    func reprioritisedQueuedRequestMovesAhead(_ kind: TransportKind) async throws {
        let gate = Gate()
        let server = try await trafficServer(gate: gate)
        // No ageing: on a loaded machine the waits below can take seconds, and a queued request would climb levels.
        try await withClient(
            kind, server: server, configure: { $0.scheduling = .init(maxConcurrentRequests: 1, agingInterval: .seconds(3600)) }
        ) { client in
            let blocker = client.start(Endpoint<Article>(path: "/slow/blocker"))
            #expect(await eventually { server.requests.count == 1 })
            // One at a time: each request's task must reach the queue before the next starts, or
            // the FIFO order between the two normal requests is the tasks' race.
            let first = client.start(Endpoint<Article>(path: "/first"), priority: .normal)
            #expect(await eventually { client.traffic.queued == 1 })
            let second = client.start(Endpoint<Article>(path: "/second"), priority: .normal)
            #expect(await eventually { client.traffic.queued == 2 })
            let third = client.start(Endpoint<Article>(path: "/third"), priority: .low)
            #expect(await eventually { client.traffic.queued == 3 })
            third.priority = .veryHigh
            #expect(third.priority == .veryHigh)
            await gate.open()
            for handle in [blocker, first, second, third] { _ = try await handle.value }
            #expect(server.requests.map(\.path) == ["/slow/blocker", "/third", "/first", "/second"])
        }
    }

    @Test(arguments: TransportKind.allCases)
    func cancelledQueuedRequestNeverReachesTheServer(_ kind: TransportKind) async throws {
        let gate = Gate()
        let server = try await trafficServer(gate: gate)
        // No ageing: on a loaded machine the waits below can take seconds, and a queued request would climb levels.
        try await withClient(
            kind, server: server, configure: { $0.scheduling = .init(maxConcurrentRequests: 1, agingInterval: .seconds(3600)) }
        ) { client in
            let blocker = client.start(Endpoint<Article>(path: "/slow/blocker"))
            #expect(await eventually { server.requests.count == 1 })
            let doomed = client.start(Endpoint<Article>(path: "/doomed"))
            let kept = client.start(Endpoint<Article>(path: "/kept"))
            #expect(await eventually { client.traffic.queued == 2 })
            doomed.cancel()
            let error = await expectCourierError { _ = try await doomed.value }
            #expect(error?.kind == .cancelled)
            #expect(client.traffic.queued == 1)
            await gate.open()
            _ = try await blocker.value
            _ = try await kept.value
            #expect(server.requests.map(\.path) == ["/slow/blocker", "/kept"])
        }
    }

    @Test(arguments: TransportKind.allCases)
    func perHostLimitAppliesPerHost(_ kind: TransportKind) async throws {
        let server = try await trafficServer()
        let other = try await trafficServer()
        try await withClient(kind, server: server, configure: { $0.scheduling = .init(maxConcurrentRequests: 10, maxRequestsPerHost: 1) }) {
            client in
            let a1 = client.start(Endpoint<Article>(path: "/slow/a1"))
            let a2 = client.start(Endpoint<Article>(path: "/slow/a2"))
            let b1 = client.start(Endpoint<Article>(path: other.baseURL.absoluteString + "/slow/b1"))
            #expect(await eventually { other.requests.count == 1 && server.requests.count == 1 })
            #expect(client.traffic.queued == 1)
            for handle in [a1, a2, b1] { _ = try await handle.value }
            // Host a got its two requests one after the other (one slot), while host b was not held up.
            #expect(Set(server.requests.map(\.path)) == ["/slow/a1", "/slow/a2"])
        }
        try await other.stop()
    }

    @Test(arguments: TransportKind.allCases)
    func aHostNameInAnotherCaseIsTheSameHostForItsLimit(_ kind: TransportKind) async throws {
        // RFC 3986 §6.2.2.1: the host is case-insensitive; `LocalHost` must not get slots of its own.
        let server = try await trafficServer()
        let base = try #require(URL(string: "http://localhost:\(server.port)"))
        let (transport, shutdown) = makeTransport(kind)
        let client = Client(
            configuration: .init(transport: transport, baseURL: base) {
                $0.scheduling = .init(maxConcurrentRequests: 10, maxRequestsPerHost: 1)
            })
        let first = client.start(Endpoint<Article>(path: "/slow/a1"))
        let second = client.start(Endpoint<Article>(path: "http://LocalHost:\(server.port)/slow/a2"))
        #expect(await eventually { server.requests.count == 1 })
        #expect(client.traffic.queued == 1)
        for handle in [first, second] { _ = try await handle.value }
        #expect(server.requests.count == 2)
        try await shutdown()
        try await server.stop()
    }
}

@Suite("Batches, chains, scopes and constrained mode")
struct GroupingTests {
    @Test(arguments: TransportKind.allCases)
    func batchReportsEachResultAndKeepsSuccessesDespiteAFailure(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            let batch = client.batch(priority: .high)
            let article = batch.add(Endpoint<Article>(name: "article", path: "/json"))
            let failing = batch.add(Endpoint<Article>(name: "failing", path: "/status/500"))
            let text = batch.add(Endpoint<String>(name: "text", path: "/text", decoding: .string))
            let collector = Task { () -> [RequestBatch.Event] in
                var events: [RequestBatch.Event] = []
                for await event in batch.events { events.append(event) }
                return events
            }
            let results = await batch.results()
            let articleValue = try results[article].get()
            let textValue = try results[text].get()
            #expect(articleValue == Article(id: 1, title: "Hello"))
            #expect(textValue == "plain words")
            guard case .failure(let error) = results[failing] else {
                Issue.record("the failing item succeeded")
                return
            }
            #expect(error.status?.code == 500)
            let events = await collector.value
            #expect(events.count == 3)
            #expect(Set(events.map(\.name)) == ["article", "failing", "text"])
            #expect(events.map(\.finished).sorted() == [1, 2, 3])
            #expect(events.first { $0.name == "failing" }?.succeeded == false)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func cancellingABatchCancelsEveryUnfinishedItem(_ kind: TransportKind) async throws {
        let server = try await trafficServer(delay: .seconds(5))
        try await withClient(kind, server: server) { client in
            let batch = client.batch()
            let one = batch.add(Endpoint<Article>(path: "/slow/1"))
            let two = batch.add(Endpoint<Article>(path: "/slow/2"))
            #expect(await eventually { server.requests.count == 2 })
            batch.cancel()
            let results = await batch.results()
            for result in [results[one], results[two]] {
                guard case .failure(let error) = result else {
                    Issue.record("a cancelled item succeeded")
                    continue
                }
                #expect(error.kind == .cancelled)
            }
            #expect(await eventually { server.abandonedCount == 2 })
        }
    }

    @Test(arguments: TransportKind.allCases)
    func chainStopsAtTheFirstFailure(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            let chain = client.chain(priority: .veryHigh) { chain -> String in
                let first = try await chain.send(Endpoint<Article>(path: "/json"))
                _ = try await chain.send(Endpoint<Article>(path: "/status/401", query: ["after": first.title]))
                return try await chain.send(Endpoint<String>(path: "/text", decoding: .string))
            }
            let error = await expectCourierError { _ = try await chain.value }
            #expect(error?.status?.code == 401)
            #expect(chain.completedSteps == 1)
            #expect(server.requests.map(\.path) == ["/json", "/status/401"])
            #expect(server.requests.last?.query["after"] == "Hello")
        }
    }

    @Test(arguments: TransportKind.allCases)
    func chainUsesEachResultInTheNextStep(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            let chain = client.chain { chain -> Echo in
                let article = try await chain.send(Endpoint<Article>(path: "/json"))
                return try await chain.send(Endpoint<Echo>(path: "/echo", query: ["id": "\(article.id)"]))
            }
            let echo = try await chain.value
            #expect(echo.uri == "/echo?id=1")
            #expect(chain.completedSteps == 2)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func cancellingAChainStopsItsStepInFlightAndTheRest(_ kind: TransportKind) async throws {
        let server = try await trafficServer(delay: .seconds(5))
        try await withClient(kind, server: server) { client in
            let chain = client.chain { chain -> Article in
                _ = try await chain.send(Endpoint<Article>(path: "/slow/step1"))
                return try await chain.send(Endpoint<Article>(path: "/step2"))
            }
            #expect(await eventually { server.requests.count == 1 })
            chain.cancel()
            let error = await expectCourierError { _ = try await chain.value }
            #expect(error?.kind == .cancelled)
            #expect(await eventually { server.abandonedCount == 1 })
            #expect(server.requests.map(\.path) == ["/slow/step1"])
        }
    }

    @Test(arguments: TransportKind.allCases)
    func releasingAScopeCancelsItsRequestsMidFlight(_ kind: TransportKind) async throws {
        let server = try await trafficServer(delay: .seconds(5))
        try await withClient(kind, server: server) { client in
            var scope: RequestScope? = RequestScope()
            let handle = scope!.start(Endpoint<Article>(path: "/slow/a"), on: client)
            let other = scope!.start(Endpoint<Article>(path: "/slow/b"), on: client)
            #expect(await eventually { server.requests.count == 2 })
            #expect(scope?.activeCount == 2)
            scope = nil
            for item in [handle, other] {
                let error = await expectCourierError { _ = try await item.value }
                #expect(error?.kind == .cancelled)
            }
            #expect(await eventually { server.abandonedCount == 2 })
        }
    }

    @Test(arguments: TransportKind.allCases)
    func noCompletionRunsAfterCancelAll(_ kind: TransportKind) async throws {
        let server = try await trafficServer(delay: .milliseconds(200))
        try await withClient(kind, server: server) { client in
            let scope = RequestScope()
            let queue = DispatchQueue(label: "delivery")
            let calls = Locked<[String]>([])
            scope.send(Endpoint<Article>(path: "/slow/cancelled"), on: client, queue: queue) { _ in
                calls.withLock { $0.append("cancelled") }
            }
            #expect(await eventually { server.requests.count == 1 })
            scope.cancelAll()
            let delivered = Locked(false)
            scope.send(Endpoint<Article>(path: "/fast"), on: client, queue: queue) { result in
                calls.withLock { $0.append((try? result.get().title) ?? "error") }
                delivered.withLock { $0 = true }
            }
            #expect(await eventually { delivered.current })
            try await Task.sleep(for: .milliseconds(300))
            #expect(calls.current == ["/fast"])
        }
    }

    @Test(arguments: TransportKind.allCases)
    func constrainedModeRefusesPrefetchesAndLetsUserRequestsThrough(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            client.isConstrained = true
            let error = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/json").prefetch()) }
            #expect(error?.kind == .constrained)
            let article = try await client.send(Endpoint<Article>(path: "/json"))
            #expect(article.id == 1)
            #expect(server.requests.count == 1)
            client.isConstrained = false
            _ = try await client.send(Endpoint<Article>(path: "/json").prefetch())
            #expect(server.requests.count == 2)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func constrainedModeCanDeferPrefetchesUntilItEnds(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server, configure: { $0.constrainedPolicy = .defer }) { client in
            client.isConstrained = true
            let prefetch = client.start(Endpoint<Article>(path: "/json").prefetch())
            try await Task.sleep(for: .milliseconds(200))
            #expect(server.requests.isEmpty)
            client.isConstrained = false
            let prefetched = try await prefetch.value
            #expect(prefetched.id == 1)
            #expect(server.requests.count == 1)
        }
    }
}
