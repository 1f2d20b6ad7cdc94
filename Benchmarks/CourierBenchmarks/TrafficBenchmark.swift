import Courier
import CourierAsyncHTTPClient
import Foundation
import NIOSSL

/// Issue 4's benchmark: scheduling overhead with 10,000 queued requests, and what deduplication saves.
struct TrafficBenchmark {
    func run() async throws {
        try await self.schedulerDecisions()
        try await self.schedulerWithTasks()
        try await self.deduplicationSaving()
    }

    /// The pure decisions: submit 10,000 requests behind a full slot, then drain them.
    func schedulerDecisions() async throws {
        let count = 10_000
        var state = SchedulerState(configuration: .init(maxConcurrentRequests: 1))
        let now = ContinuousClock.now
        let clock = ContinuousClock()
        let start = clock.now
        _ = state.submit(id: 0, host: "h", priority: .normal, now: now)
        for id in 1...count {
            _ = state.submit(id: UInt64(id), host: "h", priority: RequestPriority(rawValue: id % 5)!, now: now)
        }
        var started = 0
        while !state.finish(host: "h", now: now).isEmpty { started += 1 }
        let elapsed = clock.now - start
        precondition(started == count)
        print("scheduler decisions: \(count) requests submitted and drained, \(format(micros(elapsed) / Double(count), 2)) µs per request")
        // Re-prioritisation with 1,000 and 10,000 queued: the cost per change should not grow with
        // the queue (a change appends to its new priority's queue; the old entry is dropped lazily).
        for queued in [1_000, 10_000] {
            var state = SchedulerState(configuration: .init(maxConcurrentRequests: 1))
            _ = state.submit(id: 0, host: "h", priority: .normal, now: now)
            for id in 1...queued {
                _ = state.submit(id: UInt64(id), host: "h", priority: .normal, now: now)
            }
            let changes = 100_000
            let start = clock.now
            for change in 0..<changes {
                let id = UInt64(change % queued + 1)
                precondition(state.reprioritize(id: id, to: RequestPriority(rawValue: change % 5)!))
            }
            let changed = clock.now - start
            var drained = 0
            let drainStart = clock.now
            while !state.finish(host: "h", now: now).isEmpty { drained += 1 }
            let drainTime = clock.now - drainStart
            precondition(drained == queued)
            print(
                "scheduler re-prioritisation with \(queued) queued: \(format(micros(changed) * 1000 / Double(changes), 0)) ns per change; "
                    + "draining afterwards \(format(micros(drainTime) / Double(queued), 2)) µs per request")
        }
    }

    /// The runtime scheduler with real tasks parked: 10,000 waiting behind one slot.
    func schedulerWithTasks() async throws {
        let count = 10_000
        // Baseline: the same number of tasks, each parked on a continuation and resumed, without a scheduler.
        let parked = Locked<[CheckedContinuation<Void, Never>]>([])
        let baseClock = ContinuousClock()
        let baseCPU = processCPUSeconds()
        let baseStart = baseClock.now
        let baseTasks = (0..<count).map { _ in
            Task { await withCheckedContinuation { continuation in parked.withLock { $0.append(continuation) } } }
        }
        while parked.withLock({ $0.count }) < count { try await Task.sleep(for: .milliseconds(1)) }
        for continuation in parked.withLock({ $0 }) { continuation.resume() }
        for task in baseTasks { await task.value }
        let baseline = (processCPUSeconds() - baseCPU) / Double(count) * 1e6
        print(
            "baseline: \(count) tasks parked and resumed without a scheduler, \(format(micros(baseClock.now - baseStart) / Double(count), 2)) µs wall, \(format(baseline, 2)) µs CPU per task"
        )

        let scheduler = RequestScheduler(configuration: .init(maxConcurrentRequests: 1))
        let before = residentMemory()
        let blocker = scheduler.makeTicket()
        try await scheduler.acquire(ticket: blocker, host: "h", priority: .normal)
        let clock = ContinuousClock()
        let cpuStart = processCPUSeconds()
        let start = clock.now
        let done = Locked(0)
        let tasks = (0..<count).map { index in
            Task {
                let ticket = scheduler.makeTicket()
                try await scheduler.acquire(ticket: ticket, host: "h", priority: RequestPriority(rawValue: index % 5)!)
                done.withLock { $0 += 1 }
                scheduler.release(host: "h")
            }
        }
        while scheduler.snapshot.queued < count { try await Task.sleep(for: .milliseconds(1)) }
        let queuedAt = clock.now
        let queuedMemory = residentMemory()
        scheduler.release(host: "h")
        for task in tasks { try await task.value }
        let end = clock.now
        let cpu = processCPUSeconds() - cpuStart
        precondition(done.current == count)
        print(
            "scheduler with tasks: \(count) queued in \(format(millis(queuedAt - start), 1)) ms, drained in \(format(millis(end - queuedAt), 1)) ms; "
                + "\(format(micros(end - start) / Double(count), 2)) µs wall and \(format(cpu / Double(count) * 1e6, 2)) µs CPU per request (queue + start + release, task wake-up included); "
                + "memory \(format(queuedMemory.current - before.current, 1)) MiB more with all queued (peak RSS \(format(queuedMemory.peak, 1)) MiB)"
        )
    }

    /// 1,000 identical GETs (server answers after 50 ms), 100 at a time, with and without deduplication.
    func deduplicationSaving() async throws {
        let server = try ServerProcess()
        defer { server.stop() }
        let url = URL(string: "http://127.0.0.1:\(server.plainPort)/delay/50")!
        for dedup in [true, false] {
            let transport = AsyncHTTPClientTransport()
            let counter = Locked(0)
            let client = Client(
                configuration: .init(transport: transport, baseURL: url) {
                    $0.deduplication.isEnabled = dedup
                    $0.middleware = [
                        ClosureMiddleware { request, next in
                            counter.withLock { $0 += 1 }
                            return try await next(request)
                        }
                    ]
                })
            let endpoint = Endpoint<BenchmarkItem>(path: "")
            let clock = ContinuousClock()
            let cpuStart = processCPUSeconds()
            let start = clock.now
            try await withThrowingTaskGroup(of: Void.self) { group in
                var launched = 0
                for _ in 0..<100 {
                    group.addTask { _ = try await client.send(endpoint) }
                    launched += 1
                }
                while try await group.next() != nil {
                    if launched < 1_000 {
                        group.addTask { _ = try await client.send(endpoint) }
                        launched += 1
                    }
                }
            }
            let elapsed = clock.now - start
            let cpu = processCPUSeconds() - cpuStart
            print(
                "deduplication \(dedup ? "on " : "off"): 1000 calls, \(counter.current) reached the wire, \(format(millis(elapsed), 0)) ms wall, \(format(cpu * 1000, 0)) ms CPU"
            )
            try await transport.shutdown()
        }
    }
}

func micros(_ duration: Duration) -> Double {
    Double(duration.components.seconds) * 1e6 + Double(duration.components.attoseconds) / 1e12
}

func millis(_ duration: Duration) -> Double {
    micros(duration) / 1000
}
