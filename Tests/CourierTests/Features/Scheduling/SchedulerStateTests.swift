import Courier
import Testing

@Suite("Scheduling decisions are plain values")
struct SchedulerStateTests {
    let t0 = ContinuousClock.now

    func drain(_ state: inout SchedulerState, host: String = "a", at now: ContinuousClock.Instant) -> [UInt64] {
        var order: [UInt64] = []
        while true {
            let started = state.finish(host: host, now: now)
            if started.isEmpty { break }
            order += started
        }
        return order
    }

    @Test
    func higherPrioritiesStartFirstAndFIFOWithinAPriority() {
        var state = SchedulerState(configuration: .init(maxConcurrentRequests: 1))
        let r1 = state.submit(id: 0, host: "a", priority: .normal, now: t0)
        #expect(r1)
        let queued: [(UInt64, RequestPriority)] = [(1, .low), (2, .high), (3, .normal), (4, .high), (5, .veryHigh), (6, .veryLow)]
        for (id, priority) in queued {
            let r2 = state.submit(id: id, host: "a", priority: priority, now: t0)
            #expect(!r2)
        }
        #expect(state.queuedCount == 6)
        let r3 = drain(&state, at: t0)
        #expect(r3 == [5, 2, 4, 3, 1, 6])
    }

    @Test(arguments: [
        // (seconds waited by the low request, is it started before a fresh high request?)
        (0.0, false), (3.9, false), (4.0, true), (9.0, true),
    ])
    func ageingLiftsAWaitingRequestOneLevelPerInterval(waited: Double, lowFirst: Bool) {
        var state = SchedulerState(configuration: .init(maxConcurrentRequests: 1, agingInterval: .seconds(2)))
        let r4 = state.submit(id: 0, host: "a", priority: .normal, now: t0)
        #expect(r4)
        _ = state.submit(id: 1, host: "a", priority: .low, now: t0)
        let now = t0 + .milliseconds(Int64(waited * 1000))
        _ = state.submit(id: 2, host: "a", priority: .high, now: now)
        // low (1) + 2 levels after 4 s equals high (3); ties go to the earlier arrival.
        let r5 = drain(&state, at: now).first
        #expect(r5 == (lowFirst ? 1 : 2))
    }

    @Test
    func perHostLimitQueuesOnlyThatHost() {
        var state = SchedulerState(configuration: .init(maxConcurrentRequests: 10, maxRequestsPerHost: 2))
        let r6 = state.submit(id: 1, host: "a", priority: .normal, now: t0)
        #expect(r6)
        let r7 = state.submit(id: 2, host: "a", priority: .normal, now: t0)
        #expect(r7)
        let r8 = state.submit(id: 3, host: "a", priority: .normal, now: t0)
        #expect(!r8)
        let r9 = state.submit(id: 4, host: "b", priority: .normal, now: t0)
        #expect(r9)
        #expect(state.snapshot.inFlightByHost == ["a": 2, "b": 1])
        let r10 = state.finish(host: "b", now: t0).isEmpty
        #expect(r10)
        let r11 = state.finish(host: "a", now: t0)
        #expect(r11 == [3])
    }

    @Test
    func http2HostsGetTheHigherLimit() {
        var state = SchedulerState(configuration: .init(maxConcurrentRequests: 100, maxRequestsPerHost: 1, maxRequestsPerHTTP2Host: 3))
        let r12 = state.submit(id: 1, host: "h2", priority: .normal, now: t0)
        #expect(r12)
        let r13 = state.submit(id: 2, host: "h2", priority: .normal, now: t0)
        #expect(!r13)
        let r14 = state.submit(id: 3, host: "h2", priority: .normal, now: t0)
        #expect(!r14)
        state.markHTTP2("h2")
        let r15 = state.startReady(now: t0)
        #expect(r15 == [2, 3])
        let r16 = state.submit(id: 4, host: "h2", priority: .normal, now: t0)
        #expect(!r16)
    }

    @Test
    func theHostsRememberedAsHTTP2StayBounded() {
        // Every host that ever answered over HTTP/2 was kept for the client's life.
        var state = SchedulerState()
        for index in 0..<(3 * SchedulerState.maxHTTP2Hosts) { state.markHTTP2("cdn\(index).example") }
        #expect(state.http2HostCount <= SchedulerState.maxHTTP2Hosts)
        // The last one marked keeps its HTTP/2 limit.
        let last = "cdn\(3 * SchedulerState.maxHTTP2Hosts - 1).example"
        #expect(state.limit(for: last) == state.configuration.maxRequestsPerHTTP2Host)
    }

    @Test
    func cancelledQueuedRequestIsNeverStarted() {
        var state = SchedulerState(configuration: .init(maxConcurrentRequests: 1))
        let r17 = state.submit(id: 1, host: "a", priority: .normal, now: t0)
        #expect(r17)
        _ = state.submit(id: 2, host: "a", priority: .high, now: t0)
        _ = state.submit(id: 3, host: "a", priority: .normal, now: t0)
        let r18 = state.cancel(id: 2)
        #expect(r18)
        let r19 = state.cancel(id: 2)
        #expect(!r19)
        let r20 = drain(&state, at: t0)
        #expect(r20 == [3])
    }

    @Test
    func reprioritisedRequestMoves() {
        var state = SchedulerState(configuration: .init(maxConcurrentRequests: 1))
        let r21 = state.submit(id: 1, host: "a", priority: .normal, now: t0)
        #expect(r21)
        _ = state.submit(id: 2, host: "a", priority: .low, now: t0)
        _ = state.submit(id: 3, host: "a", priority: .normal, now: t0)
        _ = state.submit(id: 4, host: "a", priority: .low, now: t0)
        let r22 = state.reprioritize(id: 4, to: .veryHigh)
        #expect(r22)
        #expect(state.priority(of: 4) == .veryHigh)
        #expect(state.snapshot.queuedByPriority == [.low: 1, .normal: 1, .veryHigh: 1])
        let r23 = drain(&state, at: t0)
        #expect(r23 == [4, 3, 2])
        let r24 = state.reprioritize(id: 4, to: .low)
        #expect(!r24)
    }

    @Test
    func aNewcomerDoesNotOvertakeWaitersOfItsHost() {
        var state = SchedulerState(configuration: .init(maxConcurrentRequests: 1))
        let r25 = state.submit(id: 1, host: "a", priority: .normal, now: t0)
        #expect(r25)
        _ = state.submit(id: 2, host: "a", priority: .normal, now: t0)
        let r26 = state.finish(host: "a", now: t0)
        #expect(r26 == [2])
        let r27 = state.submit(id: 3, host: "a", priority: .veryHigh, now: t0)
        #expect(!r27)
    }

    @Test
    func tenThousandQueuedRequestsDrainInPriorityOrder() {
        var state = SchedulerState(configuration: .init(maxConcurrentRequests: 1))
        let r28 = state.submit(id: 0, host: "a", priority: .normal, now: t0)
        #expect(r28)
        for id in 1...10_000 {
            _ = state.submit(id: UInt64(id), host: id % 2 == 0 ? "a" : "b", priority: RequestPriority(rawValue: id % 5)!, now: t0)
        }
        var previous = RequestPriority.veryHigh
        var count = 0
        var host = "a"
        while true {
            let started = state.finish(host: host, now: t0)
            guard let id = started.first else { break }
            let priority = RequestPriority(rawValue: Int(id) % 5)!
            #expect(priority <= previous)
            previous = priority
            host = id % 2 == 0 ? "a" : "b"
            count += 1
        }
        #expect(count == 10_000)
    }
}

extension SchedulerStateTests {
    /// A cancelled entry never makes an idle host look busy: a newcomer starts at once.
    @Test
    func aCancelledEntryLeavesNoGhostInFrontOfANewcomer() {
        var state = SchedulerState(configuration: .init(maxConcurrentRequests: 8, maxRequestsPerHost: 1))
        let first = state.submit(id: 1, host: "a", priority: .normal, now: self.t0)
        let second = state.submit(id: 2, host: "a", priority: .normal, now: self.t0)
        let cancelled = state.cancel(id: 2)
        let started = state.finish(host: "a", now: self.t0)
        #expect(first && !second && cancelled && started.isEmpty)
        // Host a is idle; before the fix the stale queue entry made it look busy and id 3 waited forever.
        let third = state.submit(id: 3, host: "a", priority: .normal, now: self.t0)
        #expect(third)
        #expect(state.queuedCount == 0)
    }

    @Test
    func timePausedDoesNotCountAsWaiting() {
        // A suspended client pauses its scheduler: after five minutes, a low request held all
        // along must not have aged past a very high one held for a moment.
        var state = SchedulerState(configuration: .init(maxConcurrentRequests: 1, agingInterval: .seconds(2)))
        let busy = state.submit(id: 0, host: "a", priority: .normal, now: t0)
        #expect(busy)
        // Waited 10 s (five levels) before the pause: that wait still counts.
        let early = state.submit(id: 1, host: "a", priority: .veryLow, now: t0)
        state.pause(now: t0 + .seconds(10))
        let held = state.submit(id: 2, host: "a", priority: .low, now: t0 + .seconds(10))
        let urgent = state.submit(id: 3, host: "a", priority: .veryHigh, now: t0 + .seconds(309))
        #expect(!early && !held && !urgent)
        // The one slot is still taken: nothing starts on resume itself.
        let startedOnResume = state.unpause(now: t0 + .seconds(310))
        #expect(startedOnResume.isEmpty)
        // veryLow + 5 levels = 5 > veryHigh = 4 > low, unaged.
        #expect(drain(&state, at: t0 + .seconds(310)) == [1, 3, 2])
    }

    @Test
    func cancelledAndReprioritisedEntriesGoWhenTheirHostHasNoneLeft() {
        // Entries go lazily, at the head of their queue; with nothing left to queue, nothing
        // trimmed them, and ten thousand cancelled requests stayed in memory.
        var state = SchedulerState(configuration: .init(maxConcurrentRequests: 2, maxRequestsPerHost: 1))
        let busyA = state.submit(id: 0, host: "a", priority: .normal, now: t0)
        let busyB = state.submit(id: 1, host: "b", priority: .normal, now: t0)
        #expect(busyA && busyB)
        var outcomes: [Bool] = []
        for id in UInt64(2)..<10_002 { outcomes.append(state.submit(id: id, host: id % 2 == 0 ? "a" : "b", priority: .normal, now: t0)) }
        #expect(!outcomes.contains(true))
        // Moved: each leaves a stale entry behind in its old queue.
        outcomes = []
        for id in UInt64(2)..<102 { outcomes.append(state.reprioritize(id: id, to: .high)) }
        for id in stride(from: UInt64(2), to: 10_002, by: 2) { outcomes.append(state.cancel(id: id)) }
        #expect(!outcomes.contains(false))
        // Host a has none left: its entries are gone; b's 5,000 live ones stay.
        #expect(state.queueEntryCount == 5_000 + 50)
        outcomes = []
        for id in stride(from: UInt64(3), to: 10_002, by: 2) { outcomes.append(state.cancel(id: id)) }
        #expect(!outcomes.contains(false))
        #expect(state.queuedCount == 0)
        #expect(state.queueEntryCount == 0)
        // Nothing of them is left in the way of what comes next.
        let next = state.submit(id: 20_000, host: "a", priority: .low, now: t0)
        #expect(!next)
        let started = state.finish(host: "a", now: t0)
        #expect(started == [20_000])
    }

    @Test
    func aRequestNumberedEarlierGoesFirstWhateverItsArrival() {
        var state = SchedulerState(configuration: SchedulerConfiguration(maxConcurrentRequests: 1))
        let now = ContinuousClock.now
        let startedAtOnce = state.submit(id: 0, host: "a", priority: .normal, now: now)
        #expect(startedAtOnce == true)
        let first = state.makeOrder()
        let second = state.makeOrder()
        let third = state.makeOrder()
        // They arrive in the order third, first, second; a request with no number arrives last.
        let queued2 = state.submit(id: 3, host: "a", priority: .normal, order: third, now: now)
        #expect(queued2 == false)
        let queued3 = state.submit(id: 1, host: "a", priority: .normal, order: first, now: now)
        #expect(queued3 == false)
        let queued4 = state.submit(id: 2, host: "a", priority: .normal, order: second, now: now)
        #expect(queued4 == false)
        let queued5 = state.submit(id: 4, host: "a", priority: .normal, now: now)
        #expect(queued5 == false)
        // A higher priority still goes before every number.
        let latest = state.makeOrder()
        let queued6 = state.submit(id: 5, host: "a", priority: .high, order: latest, now: now)
        #expect(queued6 == false)
        var started: [UInt64] = []
        for _ in 0..<5 { started += state.finish(host: "a", now: now) }
        #expect(started == [5, 1, 2, 3, 4])
    }

    /// A request numbered earlier that arrives later goes first, with the wait of the request it
    /// overtook: the ageing that request earned is not hidden behind a fresh head.
    @Test
    func aLateArrivalNumberedEarlierCarriesTheWaitOfWhatItOvertakes() {
        var state = SchedulerState(configuration: SchedulerConfiguration(maxConcurrentRequests: 1, agingInterval: .seconds(2)))
        let start = ContinuousClock.now
        let startedAtOnce = state.submit(id: 0, host: "a", priority: .normal, now: start)
        #expect(startedAtOnce)
        let early = state.makeOrder()
        // X queues at `start` with a later number; P, numbered before it, arrives 10 s later
        // (five levels of ageing later), together with H at high priority.
        let xQueued = state.submit(id: 1, host: "a", priority: .normal, now: start)
        let later = start + .seconds(10)
        let pQueued = state.submit(id: 2, host: "a", priority: .normal, order: early, now: later)
        let hQueued = state.submit(id: 3, host: "a", priority: .high, now: later)
        #expect(!xQueued && !pQueued && !hQueued)
        // The normal queue's head (P) carries X's five levels: it goes before H, then X, then H.
        var started: [UInt64] = []
        for _ in 0..<3 { started += state.finish(host: "a", now: later) }
        #expect(started == [2, 1, 3])
    }

    @Test
    func aRequestRaisedAheadOfOlderOnesCarriesTheirWait() {
        // As for a late arrival: R, numbered before X but queued 10 s after it at low priority,
        // is raised to normal and goes ahead of X. The normal queue's head then carries X's five
        // levels of ageing: a new high request H does not pass them both (R, X, then H).
        var state = SchedulerState(configuration: SchedulerConfiguration(maxConcurrentRequests: 1, agingInterval: .seconds(2)))
        let start = ContinuousClock.now
        let startedAtOnce = state.submit(id: 0, host: "a", priority: .normal, now: start)
        #expect(startedAtOnce)
        let early = state.makeOrder()
        let xQueued = state.submit(id: 1, host: "a", priority: .normal, now: start)
        let later = start + .seconds(10)
        let rQueued = state.submit(id: 2, host: "a", priority: .low, order: early, now: later)
        let raised = state.reprioritize(id: 2, to: .normal)
        #expect(raised)
        let hQueued = state.submit(id: 3, host: "a", priority: .high, now: later)
        #expect(!xQueued && !rQueued && !hQueued)
        var started: [UInt64] = []
        for _ in 0..<3 { started += state.finish(host: "a", now: later) }
        #expect(started == [2, 1, 3])
    }
}
