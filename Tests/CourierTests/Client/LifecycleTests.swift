import CourierOutbox
import CourierTestServer
import Foundation
import HTTPTypes
import Testing

@testable import Courier

@Suite("Client lifecycle: cancel everything, suspend and resume, shut down")
struct LifecycleTests {
    @Test(arguments: TransportKind.allCases)
    func cancelAllEndsInFlightQueuedAndSharedRequestsWithTheReason(_ kind: TransportKind) async throws {
        let gate = Gate()
        let server = try await http1Server { request in
            if request.path.hasPrefix("/held") { await gate.wait() }
            return .json(#"{"id":1,"title":"x"}"#)
        }
        try await withClient(
            kind, server: server,
            configure: {
                $0.scheduling = SchedulerConfiguration(maxConcurrentRequests: 1, maxRequestsPerHost: 1)
                $0.retry = .never
                // No deadline: the work runs in a task only so that `cancelAll` can reach it (the
                // shutdown test below covers requests with a deadline).
                $0.timeout = nil
            }
        ) { client in
            let inFlight = client.start(Endpoint<Article>(path: "/held/a"))
            #expect(await eventually { server.requests.count == 1 })
            let joiner = client.start(Endpoint<Article>(path: "/held/a"))
            let queued = client.start(Endpoint<Article>(path: "/held/b"))
            let noDeadline = client.start(Endpoint<Article>(path: "/held/c"))
            // Each is where it should be before the cancel: one in flight, one joined to it, two
            // in the scheduler's queue.
            #expect(await eventually { client.parts.lifecycle.runningCount == 4 && client.traffic.queued == 2 })
            let cancelled = client.cancelAll(reason: "signing out")
            #expect(cancelled == 4)
            for handle in [inFlight, joiner, queued, noDeadline] {
                let error = await expectCourierError { _ = try await handle.value }
                #expect(error?.kind == .cancelled)
                #expect(error?.message == "signing out")
            }
            await gate.open()
            // Nothing is left behind: a new request gets a slot and an answer.
            let fresh = try await client.send(Endpoint<Article>(path: "/json"))
            #expect(fresh.id == 1)
            #expect(!server.requests.contains { $0.path == "/held/b" })
        }
    }

    /// `cancelAll` cancels "every request … queued or in flight": a request `start` returned
    /// just before is one, although its task may not have run yet. It used to take its ticket
    /// only when its task reached the lifecycle stage, so `cancelAll` returned 0 and the request
    /// went out and succeeded.
    @Test(arguments: TransportKind.allCases)
    func cancelAllReachesARequestStartedJustBefore(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            // Held by the scheduler: the request's task runs on another thread and may pass the
            // lifecycle stage before `cancelAll`, and then it would reach the wire (and be
            // cancelled there). Held, nothing can be sent, whichever comes first.
            client.suspend()
            for round in 0..<20 {
                let handle = client.start(Endpoint<Echo>(path: "/echo"))
                let cancelled = client.cancelAll(reason: "signing out \(round)")
                #expect(cancelled == 1)
                let error = await expectCourierError { _ = try await handle.value }
                #expect(error?.kind == .cancelled)
                #expect(error?.message == "signing out \(round)")
            }
            // Nothing was sent, and no ticket was left behind.
            #expect(server.requests.isEmpty)
            #expect(client.parts.lifecycle.runningCount == 0)
            client.resume()
            let fresh = try await client.send(Endpoint<Echo>(path: "/echo"))
            #expect(fresh.uri == "/echo")
        }
    }

    /// An upload, a download and `updates` return at once and run in a task of their own, as
    /// `start` does: `cancelAll` right after the call reaches them too (before, each took its
    /// ticket only when its task reached the lifecycle stage, so `cancelAll` returned 0 and the
    /// request went out).
    @Test(arguments: TransportKind.allCases)
    func cancelAllReachesAnUploadStartedJustBefore(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            // Held by the scheduler: the request's task runs on another thread and may pass the
            // lifecycle stage before `cancelAll`, and then it would reach the wire (and be
            // cancelled there). Held, nothing can be sent, whichever comes first.
            client.suspend()
            for round in 0..<10 {
                let upload = client.upload(Endpoint<Echo>(method: .post, path: "/echo", body: .json(["round": round])))
                let cancelled = client.cancelAll(reason: "signing out \(round)")
                #expect(cancelled == 1)
                let error = await expectCourierError { _ = try await upload.value }
                #expect(error?.kind == .cancelled)
                #expect(error?.message == "signing out \(round)")
            }
            #expect(server.requests.isEmpty)
            #expect(client.parts.lifecycle.runningCount == 0)
            client.resume()
            let fresh = try await client.upload(Endpoint<Echo>(method: .post, path: "/echo", body: .json(["round": 10]))).value
            #expect(fresh.value.method == "POST")
        }
    }

    @Test(arguments: TransportKind.allCases)
    func cancelAllReachesADownloadStartedJustBefore(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        let directory = temporaryDirectory("lifecycle-download")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        try await withClient(kind, server: server) { client in
            // Held by the scheduler: the request's task runs on another thread and may pass the
            // lifecycle stage before `cancelAll`, and then it would reach the wire (and be
            // cancelled there). Held, nothing can be sent, whichever comes first.
            client.suspend()
            for round in 0..<10 {
                let download = client.download(
                    Endpoint<Data>(path: "/json", decoding: .data),
                    to: DownloadDestination(directory: directory, fileName: "d\(round).json"))
                let cancelled = client.cancelAll(reason: "signing out \(round)")
                #expect(cancelled == 1)
                let error = await expectCourierError { _ = try await download.value }
                #expect(error?.kind == .cancelled)
                #expect(error?.message == "signing out \(round)")
            }
            #expect(server.requests.isEmpty)
            #expect(client.parts.lifecycle.runningCount == 0)
            // Nothing of any file came: neither a file nor a partial one is left.
            #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).isEmpty)
            client.resume()
            let fresh = try await client.download(
                Endpoint<Data>(path: "/json", decoding: .data), to: DownloadDestination(directory: directory, fileName: "fresh.json")
            ).value
            #expect(fresh.byteCount > 0)
            #expect(server.requests.count == 1)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func cancelAllReachesUpdatesStartedJustBefore(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            // Held by the scheduler: the request's task runs on another thread and may pass the
            // lifecycle stage before `cancelAll`, and then it would reach the wire (and be
            // cancelled there). Held, nothing can be sent, whichever comes first.
            client.suspend()
            for round in 0..<10 {
                let updates = client.updates(Endpoint<Echo>(path: "/echo"))
                let cancelled = client.cancelAll(reason: "signing out \(round)")
                #expect(cancelled == 1)
                var values = 0
                let error = await expectCourierError {
                    for try await _ in updates { values += 1 }
                }
                #expect(error?.kind == .cancelled)
                #expect(error?.message == "signing out \(round)")
                #expect(values == 0)
            }
            #expect(server.requests.isEmpty)
            #expect(client.parts.lifecycle.runningCount == 0)
            client.resume()
        }
    }

    /// A started request that fails before the lifecycle stage (its body cannot be encoded: the
    /// build stage is above it) gives back the ticket it took when started.
    @Test(arguments: TransportKind.allCases)
    func aStartedRequestThatFailsBeforeTheLifecycleStageLeavesNoTicket(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            let handle = client.start(Endpoint<Echo>(method: .post, path: "/echo", body: .json(["x": Double.nan])))
            let error = await expectCourierError { _ = try await handle.value }
            #expect(error != nil)
            #expect(client.parts.lifecycle.runningCount == 0)
            #expect(client.cancelAll() == 0)
            #expect(server.requests.isEmpty)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aRequestCancelledAfterItsAnswerArrivedFailsAsCounted(_ kind: TransportKind) async throws {
        // `cancelAll` counts every request it cancels, and each of them fails with the reason:
        // one whose answer arrived but is still being decoded is no exception (it used to
        // succeed though counted, so an app signing out applied an answer it had cancelled).
        let server = try await http1Server()
        let counted = Locked<Int?>(nil)
        try await withClient(kind, server: server) { client in
            let endpoint = Endpoint<String>(
                path: "/text",
                decoding: .reform { body, _ in
                    counted.withLock { $0 = client.cancelAll(reason: "signing out") }
                    return String(decoding: body, as: UTF8.self)
                })
            let error = await expectCourierError { _ = try await client.send(endpoint) }
            #expect(counted.current == 1)
            #expect(error?.kind == .cancelled)
            #expect(error?.message == "signing out")
            // It keeps the answer that came: the server did take the request.
            #expect(error?.status == .ok)
            // The next request is not affected.
            let next = try await client.send(Endpoint<String>(path: "/text", decoding: .string))
            #expect(!next.isEmpty)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func suspendHoldsNetworkRequestsWithoutFailingThemUntilResume(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        let events = CountingMonitor()
        try await withClient(kind, server: server, configure: { $0.eventMonitors = [events] }) { client in
            client.suspend()
            #expect(client.isSuspended)
            let held = client.start(Endpoint<Article>(path: "/json"))
            // Its deadline leaves room to join the first on a loaded machine.
            let short = client.start(Endpoint<Article>(path: "/json", timeout: .seconds(10)))
            // The first is held at the network's door; the second joined it (the same GET).
            #expect(await eventually { client.traffic.queued == 1 && events.count("joined") == 1 })
            // Its deadline still runs while it is held.
            let timedOut = await expectCourierError { _ = try await short.value }
            #expect(timedOut?.kind == .timeout)
            // Checked after the short one's deadline: nothing left while the client was suspended.
            #expect(server.requests.isEmpty)
            #expect(client.traffic.queued == 1)
            client.resume()
            #expect(!client.isSuspended)
            let released = try await held.value
            #expect(released.id == 1)
            #expect(server.requests.count == 1)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func suspendAlsoHoldsRequestsAlreadyQueuedForASlot(_ kind: TransportKind) async throws {
        // `suspend()` promises to hold queued requests too: one waiting for a slot when the client
        // is suspended must not take the slot the request before it frees.
        let gate = Gate()
        let server = try await http1Server { request in
            if request.path == "/held/a" { await gate.wait() }
            return .json(#"{"id":1,"title":"x"}"#)
        }
        try await withClient(
            kind, server: server, configure: { $0.scheduling = .init(maxConcurrentRequests: 1, maxRequestsPerHost: 1) }
        ) { client in
            let first = client.start(Endpoint<Article>(path: "/held/a"))
            #expect(await eventually { server.requests.count == 1 })
            let second = client.start(Endpoint<Article>(path: "/held/b"))
            #expect(await eventually { client.traffic.queued == 1 })
            client.suspend()
            await gate.open()
            _ = try await first.value
            // The slot came free, and the queued request went to the client's door instead.
            #expect(await eventually { client.traffic.queued == 1 })
            #expect(server.requests.count == 1)
            #expect(client.traffic.inFlight == 0)
            client.resume()
            _ = try await second.value
            #expect(server.requests.map(\.path) == ["/held/a", "/held/b"])
        }
    }

    /// Runs `body` with a suspended client of one slot, so requests leave one at a time.
    func withSuspendedOneSlotClient(_ kind: TransportKind, _ body: (Client, TestServer) async throws -> Void) async throws {
        let server = try await http1Server()
        try await withClient(
            kind, server: server, configure: { $0.scheduling = .init(maxConcurrentRequests: 1, maxRequestsPerHost: 1) }
        ) { client in
            client.suspend()
            try await body(client, server)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func heldRequestsLeaveOnResumeByPriorityThenInTheOrderTheyWereCalled(_ kind: TransportKind) async throws {
        // `resume()` promises priority order: the held requests used to wake together and race
        // for the one free slot, in whatever order their tasks ran.
        try await withSuspendedOneSlotClient(kind) { client, server in
            let calls: [(String, RequestPriority)] = [("low", .low), ("first", .normal), ("high", .high), ("second", .normal)]
            let handles = calls.map { name, priority in
                client.start(Endpoint<Article>(path: "/json", query: ["n": name]).priority(priority))
            }
            #expect(await eventually { client.traffic.queued == 4 })
            #expect(server.requests.isEmpty)
            client.resume()
            for handle in handles { _ = try await handle.value }
            #expect(server.requests.map(\.uri) == ["/json?n=high", "/json?n=first", "/json?n=second", "/json?n=low"])
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aHeldRequestWhosePriorityIsRaisedLeavesFirst(_ kind: TransportKind) async throws {
        // Held requests wait in the scheduler's queue, so a change of priority moves them there.
        try await withSuspendedOneSlotClient(kind) { client, server in
            let first = client.start(Endpoint<Article>(path: "/json", query: ["n": "first"]))
            let second = client.start(Endpoint<Article>(path: "/json", query: ["n": "second"]))
            #expect(await eventually { client.traffic.queued == 2 })
            second.priority = .high
            #expect(await eventually { client.traffic.queuedByPriority[.high] == 1 })
            client.resume()
            _ = try await first.value
            _ = try await second.value
            #expect(server.requests.map(\.uri) == ["/json?n=second", "/json?n=first"])
        }
    }

    @Test(arguments: TransportKind.allCases)
    func shutdownOfASuspendedClientLetsItsHeldRequestsGoWithinTheGracePeriod(_ kind: TransportKind) async throws {
        let server = try await http1Server()
        try await withClient(kind, server: server) { client in
            client.suspend()
            let held = client.start(Endpoint<Article>(path: "/json"))
            #expect(await eventually { client.traffic.queued == 1 })
            // A grace period that ends early only if the held request is answered first.
            let cancelled = await client.shutdown(gracePeriod: .seconds(120))
            #expect(cancelled == 0)
            let value = try await held.value
            #expect(value.id == 1)
            #expect(server.requests.count == 1)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func shutdownFromACancelledTaskCancelsTheRestAtOnce(_ kind: TransportKind) async throws {
        // A sleep in a cancelled task throws at once, and the grace loop ignored it: called from
        // a task that went away (a view's task, a test's teardown), shutdown spun a thread for
        // its whole grace period.
        let gate = Gate()
        let server = try await http1Server { request in
            if request.path == "/forever" { await gate.wait() }
            return .json(#"{"id":7,"title":"x"}"#)
        }
        try await withClient(kind, server: server, configure: { $0.retry = .never }) { client in
            let forever = client.start(Endpoint<Article>(path: "/forever"))
            #expect(await eventually { server.requests.count == 1 })
            let ended = Locked<Int?>(nil)
            Task {
                withUnsafeCurrentTask { $0?.cancel() }
                let count = await client.shutdown(gracePeriod: .seconds(90))
                ended.withLock { $0 = count }
            }
            #expect(await eventually(seconds: 30) { ended.current != nil })
            #expect(ended.current == 1)
            let error = await expectCourierError { _ = try await forever.value }
            #expect(error?.kind == .cancelled)
            #expect(error?.message == "the client is shut down")
            await gate.open()
        }
    }

    @Test(arguments: TransportKind.allCases)
    func shutdownLetsRunningRequestsFinishThenCancelsTheRestAndRefusesNewOnes(_ kind: TransportKind) async throws {
        let gate = Gate()
        let quickGate = Gate()
        let server = try await http1Server { request in
            switch request.path {
            case "/quick": await quickGate.wait()
            case "/forever": await gate.wait()
            default: break
            }
            return .json(#"{"id":7,"title":"x"}"#)
        }
        try await withClient(kind, server: server, configure: { $0.retry = .never }) { client in
            let quick = client.start(Endpoint<Article>(path: "/quick"))
            let forever = client.start(Endpoint<Article>(path: "/forever"))
            #expect(await eventually { server.requests.count == 2 })
            // The quick one ends during the grace period; the other is still waiting at its end.
            // (A long grace period: the quick one must finish within it even on a loaded machine,
            // where a whole process was seen to stall for 15 s; and shorter than AsyncHTTPClient's
            // 30 s read timeout, which would otherwise end the other one first.)
            let shutdown = Task { await client.shutdown(gracePeriod: .seconds(20)) }
            #expect(await eventually { client.parts.lifecycle.isShutDown })
            await quickGate.open()
            let cancelled = await shutdown.value
            #expect(cancelled == 1)
            let quickValue = try await quick.value
            #expect(quickValue.id == 7)
            let error = await expectCourierError { _ = try await forever.value }
            #expect(error?.kind == .cancelled)
            #expect(error?.message == "the client is shut down")
            let refused = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/json")) }
            #expect(refused?.kind == .cancelled)
            #expect(server.requests.count == 2)
            await gate.open()
        }
    }

    /// A shared request whose only caller left (cancelled) runs on until it notices. `shutdown`
    /// returned while it still ran — after which the app may shut the transport down or clear the
    /// cache, which it could still write to — as its work was no caller's. Now it returns once
    /// that work has ended.
    @Test(arguments: TransportKind.allCases)
    func shutdownReturnsOnceASharedRequestItsCallersLeftHasEnded(_ kind: TransportKind) async throws {
        let gate = Gate()
        let entered = Locked(false)
        let exited = Locked(false)
        let hold = ClosureMiddleware { request, next in
            entered.withLock { $0 = true }
            await gate.wait()
            defer { exited.withLock { $0 = true } }
            return try await next(request)
        }
        let server = try await http1Server()
        try await withClient(kind, server: server, configure: { $0.middleware = [hold] }) { client in
            let caller = client.start(Endpoint<Article>(path: "/json"))
            #expect(await eventually { entered.current })
            caller.cancel()
            let error = await expectCourierError { _ = try await caller.value }
            #expect(error?.kind == .cancelled)
            #expect(!exited.current)
            await gate.open()
            _ = await client.shutdown(gracePeriod: .seconds(10))
            #expect(exited.current)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func theOutboxFollowsTheClientsSuspendAndCancelAll(_ kind: TransportKind) async throws {
        let gate = Gate()
        let server = try await http1Server { request in
            if request.path == "/held" { await gate.wait() }
            return .json(#"{"ok":true}"#, status: 201)
        }
        try await withClient(kind, server: server, configure: { $0.retry = .never }) { client in
            var configuration = Outbox.Configuration()
            configuration.baseDelay = .milliseconds(50)
            let outbox = try Outbox(path: OutboxTests.databasePath(), client: client, configuration: configuration)
            client.suspend()
            let id = try outbox.enqueue(OutboxTests.post("/message"), queue: "a")
            let held = try outbox.enqueue(OutboxTests.post("/held"), queue: "b")
            outbox.start()
            // Both queues handed their item to the client, which holds them.
            #expect(await eventually { client.traffic.queued == 2 })
            #expect(server.requests.isEmpty)
            #expect(try outbox.item(id)?.state != .delivered)
            client.resume()
            #expect(await eventually { (try? outbox.item(id))?.state == .delivered })
            #expect(await eventually { server.requests.contains { $0.path == "/held" } })
            client.cancelAll(reason: "signing out")
            // Cancelled by the app, not failed: it stays in line, and goes once the server answers.
            #expect(await eventually { (try? outbox.item(held))?.lastError == "signing out" })
            #expect(try outbox.item(held)?.state != .dead)
            await gate.open()
            #expect(await eventually { (try? outbox.item(held))?.state == .delivered })
            await outbox.stop()
        }
    }

    /// A canceller may hold the last reference to what it cancels (the request's task, and with
    /// it a response whose release ends a body and tells the monitors), and releasing it may
    /// call back into the lifecycle. Ending a ticket (and a deadline watch) lets go of it after
    /// the lock, so such a callback neither deadlocks nor traps.
    @Test(.timeLimit(.minutes(1)))
    func releasingACancellerMayCallBackIntoTheLifecycle() throws {
        /// Runs `onRelease` when the last reference to it goes.
        final class CallsBack: Sendable {
            let onRelease: @Sendable () -> Void
            init(_ onRelease: @escaping @Sendable () -> Void) { self.onRelease = onRelease }
            deinit { self.onRelease() }
        }
        let lifecycle = Lifecycle(scheduler: RequestScheduler(configuration: SchedulerConfiguration()))
        let seen = Locked<Int?>(nil)
        let ticket = try lifecycle.begin()
        do {
            let holder = CallsBack { seen.withLock { $0 = lifecycle.runningCount } }
            lifecycle.attach(ticket) { _ in _ = holder }
        }
        // Held by the canceller until the ticket ends; released then, outside the lock.
        #expect(seen.withLock { $0 } == nil)
        lifecycle.end(ticket)
        #expect(seen.withLock { $0 } == 0)

        let watched = Locked(false)
        do {
            let holder = CallsBack { watched.withLock { $0 = !DeadlineWatch.shared.end(.max) } }
            let watch = DeadlineWatch.shared.watch(until: .now + .seconds(3600)) { _ = holder }
            #expect(DeadlineWatch.shared.end(watch) == false)
        }
        #expect(watched.withLock { $0 })
    }
}
