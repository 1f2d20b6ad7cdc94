import CourierTestServer
import Foundation
import Testing

@testable import Courier

@Suite("Scheduler: priorities, limits, re-prioritising and cancelling while queued")
struct SchedulerTests {
    /// No transport: the scheduler alone. A shared request a higher-priority caller joins in the
    /// moment before its ticket reaches the scheduler must still queue at the raised priority.
    @Test
    func aPriorityChangeBeforeTheTicketIsQueuedIsThePriorityItQueuesWith() {
        let scheduler = RequestScheduler(configuration: .init(maxConcurrentRequests: 1))
        let busy = scheduler.makeTicket()
        #expect(scheduler.tryAcquire(ticket: busy, host: "h", priority: .normal))
        let early = scheduler.makeTicket()
        scheduler.reprioritize(ticket: early, to: .veryHigh)
        #expect(scheduler.pendingPriorityChanges == 1)
        #expect(!scheduler.tryAcquire(ticket: early, host: "h", priority: .low))
        #expect(scheduler.snapshot.queuedByPriority == [.veryHigh: 1])
        #expect(scheduler.pendingPriorityChanges == 0)
    }

    /// No transport: a handle's priority set from two threads at once. Changes reach the
    /// observers one at a time, in the order they were made, so the scheduler ends on the value
    /// set last, which is the request's priority. The first change's delivery waits (up to a
    /// second) for the second's to come in beside it: before, it did, and the first's older value
    /// then overwrote the second's in the queue.
    @Test
    func twoThreadsSettingAPriorityLeaveTheSchedulerOnTheLastValue() {
        let scheduler = RequestScheduler(configuration: .init(maxConcurrentRequests: 1, agingInterval: .seconds(3600)))
        #expect(scheduler.tryAcquire(ticket: scheduler.makeTicket(), host: "h", priority: .normal))
        let queued = scheduler.makeTicket()
        #expect(!scheduler.tryAcquire(ticket: queued, host: "h", priority: .normal))
        let control = RequestControl(priority: .normal)
        let firstInObserver = DispatchSemaphore(value: 0)
        let secondInObserver = DispatchSemaphore(value: 0)
        let delivering = Locked((now: 0, most: 0))
        control.onPriorityChange { priority in
            delivering.withLock {
                $0.now += 1
                $0.most = max($0.most, $0.now)
            }
            if priority == .veryHigh {
                firstInObserver.signal()
                _ = secondInObserver.wait(timeout: .now() + 1)
            } else {
                secondInObserver.signal()
            }
            scheduler.reprioritize(ticket: queued, to: priority)
            delivering.withLock { $0.now -= 1 }
        }
        let done = DispatchGroup()
        done.enter()
        Thread.detachNewThread {
            control.setPriority(.veryHigh)
            done.leave()
        }
        firstInObserver.wait()
        done.enter()
        Thread.detachNewThread {
            control.setPriority(.low)
            done.leave()
        }
        done.wait()
        #expect(delivering.current.most == 1)
        #expect(control.priority == .low)
        #expect(scheduler.snapshot.queuedByPriority == [.low: 1])
    }

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

    @Test(arguments: TransportKind.allCases)
    func limitsSetBelowTheMinimumOnThePropertiesAreRaisedToIt(_ kind: TransportKind) async throws {
        // The initialiser raises a limit below 1 to 1; set on the properties afterwards, a 0 held
        // every request for ever. The endpoint's deadline turns such a wait into a failure here.
        let server = try await http1Server()
        try await withClient(
            kind, server: server,
            configure: {
                $0.scheduling.maxConcurrentRequests = 0
                $0.scheduling.maxRequestsPerHost = -3
                $0.scheduling.maxRequestsPerHTTP2Host = 0
                $0.scheduling.agingInterval = .zero
            }
        ) { client in
            async let first = client.send(Endpoint<Echo>(path: "/echo?a", timeout: .seconds(20)))
            async let second = client.send(Endpoint<Echo>(path: "/echo?b", timeout: .seconds(20)))
            let (a, b) = try await (first, second)
            #expect(a.uri == "/echo?a")
            #expect(b.uri == "/echo?b")
        }
    }

    @Test
    func anAgingIntervalBelowAMillisecondIsRaisedToIt() {
        // A nanosecond's interval aged a request by a million levels a millisecond: priorities
        // meant nothing. Set on the initialiser or on the property, the scheduler reads 1 ms.
        #expect(SchedulerConfiguration(agingInterval: .nanoseconds(1)).agingInterval == .milliseconds(1))
        var configuration = SchedulerConfiguration()
        configuration.agingInterval = .nanoseconds(1)
        #expect(configuration.validated.agingInterval == .milliseconds(1))
        #expect(SchedulerConfiguration(agingInterval: .milliseconds(5)).agingInterval == .milliseconds(5))
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
    func priorityChangesAfterARequestLeftTheQueueAreNotKept(_ kind: TransportKind) async throws {
        // A change made once the request has its slot (or has finished) has nothing left to move.
        // It was kept for a ticket that never comes back, one per handle, until a few thousand of
        // them were dropped at once, with any real pending change among them.
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            var handles: [RequestHandle<Echo>] = []
            for index in 0..<5 {
                // POSTs: each goes through the scheduler with its own handle's priority (a shared
                // GET is scheduled at its waiters' priority instead).
                let handle = client.start(Endpoint<Echo>(method: .post, path: "/echo", query: ["i": "\(index)"]))
                _ = try await handle.value
                handles.append(handle)
            }
            for handle in handles { handle.priority = .veryHigh }
            #expect(client.parts.scheduler.pendingPriorityChanges == 0)
        }
    }

    /// The same for a shared (deduplicated) request: a caller of a higher priority who joins it,
    /// or a caller who raises its own priority, while it is on the wire changes nothing in the
    /// scheduler. (Before: each such change was kept there for the shared request's ticket,
    /// which never queues again.)
    @Test(arguments: TransportKind.allCases)
    func priorityChangesOfASharedRequestOnTheWireAreNotKept(_ kind: TransportKind) async throws {
        let gate = Gate()
        let server = try await trafficServer(gate: gate)
        try await withClient(kind, server: server) { client in
            let endpoint = Endpoint<Article>(path: "/slow/blocker")
            let first = client.start(endpoint, priority: .low)
            #expect(await eventually { server.requests.count == 1 })
            let second = client.start(endpoint, priority: .high)
            #expect(await eventually { client.deduplicationCounts.coalesced == 1 })
            first.priority = .veryHigh
            second.priority = .veryLow
            #expect(client.parts.scheduler.pendingPriorityChanges == 0)
            await gate.open()
            _ = try await first.value
            _ = try await second.value
            #expect(server.requests.count == 1)
            #expect(client.parts.scheduler.pendingPriorityChanges == 0)
        }
    }

    // AsyncHTTPClient only: the redirect leads to an HTTP/2 server over TLS with the test CA,
    // which URLSession on Linux trusts only in the private namespace of URLSessionTLSTests.
    @Test
    func aRedirectToAnHTTP2HostDoesNotRaiseTheFirstHostsLimit() async throws {
        // An HTTP/1.1 host that redirects to an HTTP/2 host was marked HTTP/2 itself (its limit
        // raised from 1 here to 100): the final hop's protocol was credited to the first host.
        let target = try await tlsServer()
        let gate = Gate()
        let server = try await http1Server { request in
            switch request.path {
            case "/go": return .text("", status: 302, headers: [("Location", "https://localhost:\(target.port)/json")])
            default:
                await gate.wait()
                return .json(#"{"id":1,"title":"x"}"#)
            }
        }
        try await withClient(
            .asyncHTTPClient, server: server,
            configure: { $0.scheduling = .init(maxConcurrentRequests: 64, maxRequestsPerHost: 1) },
            transportConfiguration: { try? $0.trust(pemCertificates: Certificates.shared.caPEMBytes) }
        ) { client in
            let moved = try await client.response(Endpoint<Article>(path: "/go"))
            #expect(moved.version.major == 2)
            let handles = (1...3).map { client.start(Endpoint<Article>(method: .post, path: "/slow/\($0)")) }
            // All three have reached the scheduler: it decided for each, one at a time per host.
            #expect(await eventually { client.traffic.inFlight + client.traffic.queued == 3 })
            #expect(client.traffic.inFlight == 1)
            #expect(client.traffic.queued == 2)
            await gate.open()
            for handle in handles { _ = try await handle.value }
        }
        try await target.stop()
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
            // The shared request may have been queued but not yet parked in the scheduler when
            // cancelled: it leaves the queue once it parks.
            #expect(await eventually { client.traffic.queued == 1 })
            await gate.open()
            _ = try await blocker.value
            _ = try await kept.value
            #expect(server.requests.map(\.path) == ["/slow/blocker", "/kept"])
        }
    }

    @Test(arguments: TransportKind.allCases)
    func perHostLimitAppliesPerHost(_ kind: TransportKind) async throws {
        // Held until the checks are made, however long the requests take to get there.
        let gate = Gate()
        let server = try await trafficServer(gate: gate)
        let other = try await trafficServer(gate: gate)
        try await withClient(kind, server: server, configure: { $0.scheduling = .init(maxConcurrentRequests: 10, maxRequestsPerHost: 1) }) {
            client in
            let a1 = client.start(Endpoint<Article>(path: "/slow/blocker-a1"))
            let a2 = client.start(Endpoint<Article>(path: "/slow/blocker-a2"))
            let b1 = client.start(Endpoint<Article>(path: other.baseURL.absoluteString + "/slow/blocker-b1"))
            // Host b's request is on the wire while host a's second waits for a's one slot.
            #expect(await eventually { other.requests.count == 1 && server.requests.count == 1 && client.traffic.queued == 1 })
            #expect(server.requests.count == 1)
            await gate.open()
            for handle in [a1, a2, b1] { _ = try await handle.value }
            // Host a got its two requests one after the other (one slot), while host b was not held up.
            #expect(Set(server.requests.map(\.path)) == ["/slow/blocker-a1", "/slow/blocker-a2"])
        }
        try await other.stop()
    }

    @Test(arguments: TransportKind.allCases)
    func aHostNameInAnotherCaseIsTheSameHostForItsLimit(_ kind: TransportKind) async throws {
        // RFC 3986 §6.2.2.1: the host is case-insensitive; `LocalHost` must not get slots of its own.
        let gate = Gate()
        let server = try await trafficServer(gate: gate)
        let base = try #require(URL(string: "http://localhost:\(server.port)"))
        let (transport, shutdown) = makeTransport(kind)
        let client = Client(
            configuration: .init(transport: transport, baseURL: base) {
                $0.scheduling = .init(maxConcurrentRequests: 10, maxRequestsPerHost: 1)
            })
        let first = client.start(Endpoint<Article>(path: "/slow/blocker-a1"))
        let second = client.start(Endpoint<Article>(path: "http://LocalHost:\(server.port)/slow/blocker-a2"))
        #expect(await eventually { server.requests.count == 1 && client.traffic.queued == 1 })
        #expect(server.requests.count == 1)
        await gate.open()
        for handle in [first, second] { _ = try await handle.value }
        #expect(server.requests.count == 2)
        try await shutdown()
        try await server.stop()
    }
}
