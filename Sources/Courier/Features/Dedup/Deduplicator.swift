import Foundation
import HTTPTypes

/// Lets identical in-flight requests share one network request.
///
/// The first caller creates an entry and a task that performs the request; later callers with the
/// same key join the entry. Each waiter is resumed with the same bytes (and decodes them itself).
/// Cancellation is reference-counted: a waiter that cancels is resumed at once with kind
/// `cancelled`, and one whose deadline passes with kind `timeout` (each waiter's deadline is
/// watched here, so a waiter needs no task of its own); the network request is cancelled only
/// when the last waiter has gone. The shared
/// request runs at the highest priority among its waiters, and follows changes.
final class Deduplicator: Sendable {
    typealias Fetch = @Sendable (_ ticket: UInt64, _ priority: RequestPriority) async throws -> Outcome

    /// A caller waiting for a shared request. Its continuation is resumed exactly once: by
    /// whoever removes the waiter from the state, under the lock (`leave` or `finish`), or, when
    /// that happens while its caller is still setting up the wait, by the caller itself
    /// (`settle`).
    private struct Waiter {
        /// The caller's ticket, which names its wait.
        let id: UInt64
        /// The caller's wait, which keeps an answer that comes before the caller has set it up.
        let seat: Seat
        var continuation: UnsafeContinuation<Outcome, any Error>
        var priority: RequestPriority
        /// The waiter's deadline as a time since ``FixedInstant/reference`` (a fixed-layout value).
        var deadline: Duration?
    }

    private struct Entry {
        /// The ticket the request was made with: which request this entry is.
        var ticket: UInt64
        /// The scheduler ticket the request holds or waits with now: ``ticket`` until a redirect
        /// moves it to another host's queue.
        var wireTicket: UInt64
        /// Whether the request holds its slot (under ``wireTicket``): a change of priority has
        /// nothing left to move in the scheduler then, and is not sent there.
        var onWire = false
        /// The request that went on the wire for this entry.
        var leader: RequestID
        var task: Task<Void, Never>?
        var waiters = Waiters()
        var priority: RequestPriority
    }

    /// The waiters of one entry: the first in place, any others in a table (most shared
    /// requests have one waiter, which then costs no table).
    private struct Waiters: Sequence {
        private var first: (id: UInt64, waiter: Waiter)?
        private var others: [UInt64: Waiter] = [:]

        var isEmpty: Bool { self.first == nil && self.others.isEmpty }

        /// Every waiter, in no particular order.
        struct Iterator: IteratorProtocol {
            fileprivate var first: Waiter?
            fileprivate var others: Dictionary<UInt64, Waiter>.Values.Iterator

            mutating func next() -> Waiter? {
                if let first = self.first {
                    self.first = nil
                    return first
                }
                return self.others.next()
            }
        }

        func makeIterator() -> Iterator { Iterator(first: self.first?.waiter, others: self.others.values.makeIterator()) }

        subscript(id: UInt64) -> Waiter? {
            get { self.first?.id == id ? self.first?.waiter : self.others[id] }
            set {
                if self.first?.id == id {
                    if let newValue { self.first?.waiter = newValue } else { self.first = nil }
                } else if self.first == nil, let newValue, self.others[id] == nil {
                    self.first = (id, newValue)
                } else {
                    self.others[id] = newValue
                }
            }
        }

        /// Removes the waiter and returns it; `nil` when it is not here.
        mutating func remove(_ id: UInt64) -> Waiter? {
            if let first = self.first, first.id == id {
                self.first = nil
                return first.waiter
            }
            return self.others.removeValue(forKey: id)
        }
    }

    private struct State {
        var entries: [LogicalKey: Entry] = [:]
        var sharedCount = 0
        var wireCount = 0
        /// Shared requests whose work has not ended: one may outlive every caller (all left).
        var runningTasks = 0
    }

    private let state = Locked(State())
    private let reprioritize: @Sendable (_ ticket: UInt64, _ priority: RequestPriority) -> Void
    private let makeTicket: @Sendable () -> UInt64

    /// - Parameters:
    ///   - makeTicket: makes the scheduler ticket of a shared request.
    ///   - reprioritize: called when a shared request's priority changes while it waits.
    init(makeTicket: @escaping @Sendable () -> UInt64, reprioritize: @escaping @Sendable (UInt64, RequestPriority) -> Void) {
        self.makeTicket = makeTicket
        self.reprioritize = reprioritize
    }

    /// Counts of requests that joined another and requests that started one.
    var counts: (coalesced: Int, started: Int) {
        self.state.withLock { ($0.sharedCount, $0.wireCount) }
    }

    /// Waits until every shared request's work has ended, or `deadline` passes, or the caller is
    /// cancelled. A shared request whose callers all left is cancelled and runs on until it
    /// notices; its work is no caller's, so ``Lifecycle`` does not count it.
    func waitForRunningTasks(until deadline: ContinuousClock.Instant) async {
        // (A sleep in a cancelled task throws at once: the wait ends then.)
        while self.state.withLock({ $0.runningTasks }) > 0, ContinuousClock.now < deadline {
            do { try await Task.sleep(for: .milliseconds(10)) } catch { return }
        }
    }

    /// A scheduler ticket for a request that may go on the wire (see ``run(key:ticket:priority:deadline:control:requestID:lifecycle:lifecycleTicket:onJoin:fetch:)``).
    func makeSharedTicket() -> UInt64 { self.makeTicket() }

    /// Runs `fetch` for this key unless an identical request is in flight, and waits for the shared result.
    ///
    /// - Parameters:
    ///   - ticket: the scheduler ticket the request goes on the wire with if this caller is the
    ///     first (made beforehand, so `fetch` can be made with it); unused when it joins. Unique to
    ///     the call, so it also names this caller's wait.
    ///   - lifecycle: where `cancelAll` ends this caller's wait (under `lifecycleTicket`).
    /// - Returns: the response and whether it was shared with an earlier request.
    func run(
        key: LogicalKey,
        ticket: UInt64,
        priority: RequestPriority,
        deadline: ContinuousClock.Instant?,
        control: RequestControl?,
        requestID: RequestID = RequestID(),
        lifecycle: Lifecycle? = nil,
        lifecycleTicket: UInt64? = nil,
        onJoin: (@Sendable (RequestID) -> Void)? = nil,
        fetch: @escaping Fetch
    ) async throws -> (Outcome, coalesced: Bool) {
        // One object names this wait for everyone who may end it (cancellation, the deadline,
        // `cancelAll`, a change of priority): the closures handed out capture it alone, and so
        // cost no allocation of their own. It holds the deduplicator strongly: a weak reference
        // would give it a side table, and every retain and release of it would take the slow path
        // from then on. Its holders let go when the request ends (the lifecycle ticket, the
        // deadline watch) or when its handle goes (the control).
        let seat = Seat(deduplicator: self, key: key, waiterID: ticket)
        var joined = false
        var watch: UInt64?
        defer { if let watch { _ = DeadlineWatch.shared.end(watch) } }
        // Removed when this wait ends: a handle kept (in a batch, say) would otherwise keep one
        // observer, and with it this wait's seat and key, for every run it took.
        let observer = control?.onPriorityChange { newPriority in seat.change(to: newPriority) }
        defer { if let observer { control?.removeObserver(observer) } }
        let response = try await withTaskCancellationHandler {
            try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<Outcome, any Error>) in
                let (raised, leader, shared, refused): Joining = self.state.withLock { state in
                    // A caller cancelled before it arrives neither joins nor starts a request.
                    // Read under the lock: a cancellation after it finds the waiter in place
                    // (`leave`, called by the cancellation handler, takes the lock too).
                    if Task.isCancelled { return (nil, nil, nil, true) }
                    let waiter = Waiter(
                        id: ticket, seat: seat, continuation: continuation, priority: control?.priority ?? priority,
                        deadline: deadline.map(FixedInstant.offset(of:)))
                    // One lookup, which inserts a new entry when there is none (every entry in the
                    // table has a waiter: an entry without one is new).
                    let fresh = Entry(ticket: ticket, wireTicket: ticket, leader: requestID, priority: waiter.priority)
                    let outcome = Self.update(&state.entries[key, default: fresh]) {
                        entry -> (raised: (UInt64, RequestPriority)?, leader: RequestID?, shared: Task<Void, Never>?) in
                        guard entry.waiters.isEmpty else {
                            entry.waiters[ticket] = waiter
                            let before = entry.priority
                            entry.priority = max(entry.priority, waiter.priority)
                            return (
                                entry.priority != before && !entry.onWire ? (entry.wireTicket, entry.priority) : nil, entry.leader,
                                entry.task
                            )
                        }
                        entry.waiters[ticket] = waiter
                        let startPriority = waiter.priority
                        entry.task = Task {
                            let result: Result<Outcome, any Error>
                            do {
                                result = .success(try await fetch(ticket, startPriority))
                            } catch {
                                result = .failure(error)
                            }
                            self.finish(key: key, ticket: ticket, with: result)
                        }
                        return (nil, nil, nil)
                    }
                    if outcome.leader != nil {
                        joined = true
                        state.sharedCount += 1
                    } else {
                        state.wireCount += 1
                        state.runningTasks += 1
                    }
                    return (outcome.raised, outcome.leader, outcome.shared, false)
                }
                if refused {
                    continuation.resume(throwing: CourierError.cancelled())
                    return
                }
                // The shared request's task took its first caller's task priority; a joiner's
                // higher one raises it, as awaiting a task's value would (joiners await a
                // continuation, which does not). Before the join is announced, so whoever hears
                // of it finds the priority raised. (Swift 6.2's API: earlier compilers skip it.)
                #if compiler(>=6.2)
                if let shared, #available(macOS 26.0, iOS 26.0, watchOS 26.0, tvOS 26.0, visionOS 26.0, *) {
                    shared.escalatePriority(to: Task.currentPriority)
                }
                #else
                _ = shared
                #endif
                if let leader { onJoin?(leader) }
                // Someone else (the client's `cancelAll`) may end this wait.
                lifecycle?.attach(lifecycleTicket) { error in seat.leave(with: error) }
                if let (ticket, newPriority) = raised { self.publish(key: key, ticket, newPriority) }
                // Watched only once the waiter is in place, so a deadline that fires at once finds it.
                if let deadline {
                    watch = DeadlineWatch.shared.watch(until: deadline) { seat.leave(with: CourierError.timeout()) }
                }
                if Task.isCancelled { self.leave(key: key, waiterID: ticket) }
                // Last: an answer that came while this caller set up its wait is taken here.
                self.settle(seat, continuation: continuation)
            }
        } onCancel: {
            self.leave(key: key, waiterID: ticket)
        }
        return (response, joined)
    }

    /// What joining the table gave a caller: a raised priority to publish (the request's wire
    /// ticket and its new priority), the leader it joined and the shared request's task (when it
    /// joined one), and whether it was refused (cancelled before it came).
    private typealias Joining = (raised: (UInt64, RequestPriority)?, leader: RequestID?, shared: Task<Void, Never>?, refused: Bool)

    /// One caller's wait for a shared request, as those who may end it or change it see it.
    ///
    /// Until its caller has set up the wait (between joining and awaiting), an answer for it (the
    /// shared request's result, or an end by cancellation, deadline or `cancelAll`) is kept here
    /// for the caller to take (`settle`) instead of resuming it. Resuming a continuation from
    /// another thread before its task awaits it is allowed, but that path of the runtime carries
    /// no happens-before mark for ThreadSanitizer, which then reports the awaiting task's next
    /// write to its own frame as a race.
    private final class Seat: @unchecked Sendable {
        let deduplicator: Deduplicator
        let key: LogicalKey
        let waiterID: UInt64
        // Read and written only under the deduplicator's state lock.
        var isSettled = false
        var early: Result<Outcome, any Error>?

        init(deduplicator: Deduplicator, key: LogicalKey, waiterID: UInt64) {
            self.deduplicator = deduplicator
            self.key = key
            self.waiterID = waiterID
        }

        func leave(with error: CourierError) { self.deduplicator.leave(key: self.key, waiterID: self.waiterID, with: error) }
        func change(to priority: RequestPriority) { self.deduplicator.change(key: self.key, waiterID: self.waiterID, to: priority) }
    }

    /// The latest deadline among the waiters of a shared request; `nil` when one has none (or
    /// none is waiting): how long the shared request may still be worth waiting for.
    func latestDeadline(key: LogicalKey) -> ContinuousClock.Instant? {
        self.state.withLock { state in
            guard let waiters = state.entries[key]?.waiters, !waiters.isEmpty else { return nil }
            var latest: Duration?
            for waiter in waiters {
                guard let deadline = waiter.deadline else { return nil }
                latest = max(latest ?? deadline, deadline)
            }
            return latest.map(FixedInstant.instant(at:))
        }
    }

    /// Applies `change` to an entry in place (in the table: no copy of its waiters).
    private static func update<Result>(_ entry: inout Entry, _ change: (inout Entry) -> Result) -> Result {
        change(&entry)
    }

    /// The waiter gives up: resume it with `error` (`cancelled` unless said otherwise); cancel the
    /// shared request if it was the last, or let it queue at the highest priority of those left.
    private func leave(key: LogicalKey, waiterID: UInt64, with error: CourierError = .cancelled()) {
        typealias Left = (UnsafeContinuation<Outcome, any Error>?, Task<Void, Never>?, (UInt64, RequestPriority)?)
        let (continuation, task, lowered): Left = self.state.withLock { state in
            guard let index = state.entries.index(forKey: key), let waiter = state.entries.values[index].waiters.remove(waiterID)
            else { return (nil, nil, nil) }
            var continuation: UnsafeContinuation<Outcome, any Error>? = waiter.continuation
            if !waiter.seat.isSettled {
                waiter.seat.early = .failure(error)
                continuation = nil
            }
            if state.entries.values[index].waiters.isEmpty {
                return (continuation, state.entries.remove(at: index).value.task, nil)
            }
            // The request runs at the highest priority among its waiters: the one that raised it
            // may be the one leaving.
            let lowered = Self.update(&state.entries.values[index]) { entry -> (UInt64, RequestPriority)? in
                guard waiter.priority == entry.priority else { return nil }
                var highest: RequestPriority?
                for remaining in entry.waiters { highest = max(highest ?? remaining.priority, remaining.priority) }
                guard let highest, highest != entry.priority else { return nil }
                entry.priority = highest
                return entry.onWire ? nil : (entry.wireTicket, highest)
            }
            return (continuation, nil, lowered)
        }
        // The shared request first, so that when the waiter hears of it the request no longer
        // waits in the scheduler's queue. (Its cancellation handlers run on this thread: the
        // transports' never block, a middleware's that does holds the waiter.)
        task?.cancel()
        if let (ticket, priority) = lowered { self.publish(key: key, ticket, priority) }
        continuation?.resume(throwing: error)
    }

    /// Tells the scheduler a shared request's new priority. Sent after the lock, as every change
    /// is (a join's raise, a leave's lowering, a waiter's own change): one sent meanwhile may have
    /// been overtaken by this one, so the entry's priority is read again and sent again until the
    /// scheduler has the last one.
    private func publish(key: LogicalKey, _ ticket: UInt64, _ priority: RequestPriority) {
        var (ticket, priority) = (ticket, priority)
        while true {
            self.reprioritize(ticket, priority)
            let current: (UInt64, RequestPriority)? = self.state.withLock { state in
                guard let entry = state.entries[key], !entry.onWire, entry.priority != priority else { return nil }
                return (entry.wireTicket, entry.priority)
            }
            guard let current else { return }
            (ticket, priority) = current
        }
    }

    private func change(key: LogicalKey, waiterID: UInt64, to priority: RequestPriority) {
        let update: (UInt64, RequestPriority)? = self.state.withLock { state in
            guard let index = state.entries.index(forKey: key), state.entries.values[index].waiters[waiterID] != nil else { return nil }
            return Self.update(&state.entries.values[index]) { entry -> (UInt64, RequestPriority)? in
                entry.waiters[waiterID]?.priority = priority
                var highest = priority
                for waiter in entry.waiters { highest = max(highest, waiter.priority) }
                guard highest != entry.priority else { return nil }
                entry.priority = highest
                return entry.onWire ? nil : (entry.wireTicket, highest)
            }
        }
        if let (ticket, priority) = update { self.publish(key: key, ticket, priority) }
    }

    /// The shared request `key` names went to another host's queue with a new scheduler ticket
    /// (a redirect): changes of priority go to that ticket from now on. Returns the priority it
    /// should queue at (the highest among its waiters); `nil` when no waiter is left or the
    /// request is not the one holding `old`.
    func moved(key: LogicalKey, from old: UInt64, to new: UInt64) -> RequestPriority? {
        self.state.withLock { state in
            guard let index = state.entries.index(forKey: key), state.entries.values[index].wireTicket == old else { return nil }
            state.entries.values[index].wireTicket = new
            state.entries.values[index].onWire = false
            return state.entries.values[index].priority
        }
    }

    /// The shared request `key` names took its slot under `ticket`: from now on a change of
    /// priority is not sent to the scheduler, which would keep it for a ticket that never queues
    /// again (until a redirect queues the request under a new one).
    func tookSlot(key: LogicalKey, ticket: UInt64) {
        self.state.withLock { state in
            guard let index = state.entries.index(forKey: key), state.entries.values[index].wireTicket == ticket else { return }
            state.entries.values[index].onWire = true
        }
    }

    private func finish(key: LogicalKey, ticket: UInt64, with result: Result<Outcome, any Error>) {
        let waiters: Waiters = self.state.withLock { state in
            state.runningTasks -= 1
            guard let index = state.entries.index(forKey: key), state.entries.values[index].ticket == ticket else { return Waiters() }
            var waiters = state.entries.remove(at: index).value.waiters
            for waiter in waiters where !waiter.seat.isSettled {
                waiter.seat.early = result
                _ = waiters.remove(waiter.id)
            }
            return waiters
        }
        for waiter in waiters { waiter.continuation.resume(with: result) }
    }

    /// The caller has set up its wait: from now on its waiter is resumed by whoever removes it.
    /// An answer that came before (the shared request ended, the caller left) is taken here and
    /// resumes the caller on its own thread, before it awaits.
    private func settle(_ seat: Seat, continuation: UnsafeContinuation<Outcome, any Error>) {
        let early = self.state.withLock { _ -> Result<Outcome, any Error>? in
            seat.isSettled = true
            defer { seat.early = nil }
            return seat.early
        }
        if let early { continuation.resume(with: early) }
    }
}
