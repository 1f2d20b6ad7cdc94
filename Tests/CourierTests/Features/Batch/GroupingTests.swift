import CourierTestServer
import Foundation
import Testing

@testable import Courier

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
        let server = try await trafficServer(delay: .seconds(600))
        try await withClient(kind, server: server) { client in
            let batch = client.batch()
            let one = batch.add(Endpoint<Article>(path: "/slow/1"))
            let two = batch.add(Endpoint<Article>(path: "/slow/2"))
            #expect(await eventually { server.requests.count == 2 })
            batch.cancel()
            let results = await batch.results()
            for result in [results[one], results[two]] {
                #expect(await expectCourierError { _ = try result.get() }?.kind == .cancelled)
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
        let server = try await trafficServer(delay: .seconds(600))
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
        let server = try await trafficServer(delay: .seconds(600))
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
        // The answer is held until the end, so `cancelAll` comes first however slow the machine.
        let gate = Gate()
        let server = try await trafficServer(gate: gate)
        try await withClient(kind, server: server) { client in
            let scope = RequestScope()
            let queue = DispatchQueue(label: "delivery")
            let calls = Locked<[String]>([])
            let probe = LifetimeProbe()
            scope.send(Endpoint<Article>(path: "/slow/blocker-cancelled"), on: client, queue: queue) { [token = probe.token()] _ in
                withExtendedLifetime(token) { calls.withLock { $0.append("cancelled") } }
            }
            #expect(await eventually { server.requests.count == 1 })
            scope.cancelAll()
            // The cancel reached the wire: no answer can come for it any more.
            #expect(await eventually { server.abandonedCount == 1 })
            let delivered = Locked(false)
            scope.send(Endpoint<Article>(path: "/fast"), on: client, queue: queue) { result in
                calls.withLock { $0.append((try? result.get().title) ?? "error") }
                delivered.withLock { $0 = true }
            }
            #expect(await eventually { delivered.current })
            // The cancelled request's completion is released once its delivery has run (or been
            // dropped): any call would have come before.
            #expect(await eventually { probe.isReleased })
            #expect(calls.current == ["/fast"])
            await gate.open()
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
            // Held at the gate (a request the gate let through is never counted there).
            #expect(await eventually { client.parts.constrained.waitingCount == 1 })
            #expect(server.requests.isEmpty)
            client.isConstrained = false
            let prefetched = try await prefetch.value
            #expect(prefetched.id == 1)
            #expect(server.requests.count == 1)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func shutdownFailsDeferredPrefetchesAtOnce(_ kind: TransportKind) async throws {
        // A prefetch deferred while the client is constrained cannot end within any grace period
        // (it waits to save data): shutdown waited the whole period for it, then cancelled it.
        let server = try await http1Server()
        try await withClient(kind, server: server, configure: { $0.constrainedPolicy = .defer }) { client in
            client.isConstrained = true
            let prefetch = client.start(Endpoint<Article>(path: "/json").prefetch())
            #expect(await eventually { client.parts.constrained.waitingCount == 1 })
            // Shutdown is over well before its grace period, with the prefetch counted once.
            let ended = Locked<Int?>(nil)
            Task {
                let count = await client.shutdown(gracePeriod: .seconds(90))
                ended.withLock { $0 = count }
            }
            #expect(await eventually(seconds: 30) { ended.current != nil })
            #expect(ended.current == 1)
            let error = await expectCourierError { _ = try await prefetch.value }
            #expect(error?.kind == .cancelled)
            #expect(error?.message == "the client is shut down")
            #expect(server.requests.isEmpty)
            // With no grace at all, counted once as well (not once by the gate and again by the
            // cancellation of what still runs).
            let again = Client(
                configuration: .init(transport: client.configuration.transport, baseURL: server.baseURL) { $0.constrainedPolicy = .defer })
            again.isConstrained = true
            let deferred = again.start(Endpoint<Article>(path: "/json").prefetch())
            #expect(await eventually { again.parts.constrained.waitingCount == 1 })
            #expect(await again.shutdown(gracePeriod: .zero) == 1)
            #expect(await expectCourierError { _ = try await deferred.value }?.kind == .cancelled)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func noCompletionRunsOnceTheScopeIsReleasedWhileItsResultWaits(_ kind: TransportKind) async throws {
        // The result came and its delivery waits on the queue when the screen lets its scope go:
        // the delivery held the scope alive, so the release cancelled nothing and the completion
        // ran for a screen that was gone.
        let server = try await trafficServer()
        try await withClient(kind, server: server) { client in
            let queue = DispatchQueue(label: "delivery")
            queue.suspend()
            let calls = Locked(0)
            var scope: RequestScope? = RequestScope()
            weak let released = scope
            scope!.send(Endpoint<Article>(path: "/fast"), on: client, queue: queue) { _ in calls.withLock { $0 += 1 } }
            #expect(await eventually { scope!.activeCount == 0 })
            scope = nil
            // Nothing but the waiting delivery could keep it.
            #expect(await eventually { released == nil })
            queue.resume()
            queue.sync {}
            #expect(calls.current == 0)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aChainCancelledBetweenStepsFailsSilently(_ kind: TransportKind) async throws {
        // A cancellation the app made is no alert: the pipeline's cancellations are `.silent`, but
        // the chain's own (before a step is sent) kept the default presentation, `.alert`.
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            let started = Gate()
            let proceed = Gate()
            let chain = client.chain { chain -> Article in
                await started.open()
                await proceed.wait()
                return try await chain.send(Endpoint<Article>(path: "/json"))
            }
            await started.wait()
            chain.cancel()
            await proceed.open()
            let error = await expectCourierError { _ = try await chain.value }
            #expect(error?.kind == .cancelled)
            #expect(error?.presentation == .silent)
            #expect(server.requests.isEmpty)
            // A body's own cancellation error is a silent `cancelled` too.
            let own = client.chain { _ -> Int in throw CancellationError() }
            let ownError = await expectCourierError { _ = try await own.value }
            #expect(ownError?.kind == .cancelled)
            #expect(ownError?.presentation == .silent)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func batchEventsCountFinishedItemsInOrder(_ kind: TransportKind) async throws {
        // Two items ending together were counted in one order and reported in the other (2 of 2,
        // then 1 of 2): progress went back and the last event did not say the batch was done.
        // A stress test: many quick items make the race likely; no hook can force it.
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            let batch = client.batch()
            let collector = Task { () -> [Int] in
                var finished: [Int] = []
                for await event in batch.events { finished.append(event.finished) }
                return finished
            }
            for index in 0..<100 { batch.add(Endpoint<Article>(path: "/json", query: ["n": "\(index)"])) }
            _ = await batch.results()
            #expect(await collector.value == Array(1...100))
        }
    }
}
