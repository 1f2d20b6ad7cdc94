import Foundation

extension ResponseBody {
    /// This body, failing with kind `timeout` (and cancelling the rest) when a read brings nothing for `idle`.
    func idleLimited(_ idle: Duration) -> ResponseBody {
        guard case .stream(let stream) = self.storage else { return self }
        let limited = ByteStream(onCancel: { stream.cancel() }) {
            let next = SingleReader(stream.makeAsyncIterator().nextChunk)
            return {
                do {
                    return try await Deadline.run(until: .now + idle) { try await next.read() }
                } catch let error as CourierError where error.kind == .timeout && error.context == nil {
                    stream.cancel()
                    throw CourierError.timeout("no byte of the body arrived for \(idle)")
                }
            }
        }
        return .stream(limited, expectedLength: self.expectedLength)
    }
}

/// The `next` function of a stream's iterator, for the one consumer that reads it, one read at a
/// time (the iterator contract): each read may run in a child task, never two at once.
private final class SingleReader: @unchecked Sendable {
    private let next: () async throws -> Data?
    init(_ next: @escaping () async throws -> Data?) { self.next = next }
    func read() async throws -> Data? { try await self.next() }
}

/// Runs work under a deadline.
enum Deadline {
    /// The longest deadline enforced: about 68 years.
    static let longest = Duration.seconds(Int64(1) << 31)

    #if DEBUG
    /// Counts the tasks ``run(until:attach:_:)`` and ``runCancellable(attach:_:)`` make, for the
    /// code that sets it (a test: task-local, so tests running at once do not mix their counts).
    @TaskLocal static var tasksMade: Locked<Int>?

    private static func countTask() { Self.tasksMade?.withLock { $0 += 1 } }
    #endif

    /// Runs `work`, cancelling it when `deadline` passes; throws kind `timeout` then.
    ///
    /// The work runs in a task of its own (it inherits priority and task-local values, and is
    /// cancelled with the caller). Deadlines are watched by one ``DeadlineWatch`` thread for the
    /// whole process, so a request costs one task and two short locked sections, no timer of its own.
    static func run<Result: Sendable>(
        until deadline: ContinuousClock.Instant, attach: ((Task<Result, any Error>) -> Void)? = nil,
        _ work: @escaping @Sendable () async throws -> Result
    ) async throws -> Result {
        // The work runs in a new task, which does not inherit the caller's cancellation until
        // the handler below passes it on: a caller cancelled already must not start it at all
        // (it could run a step, say fetch a prerequisite, before the handler fires).
        if Task.isCancelled { throw CourierError.cancelled() }
        if deadline <= ContinuousClock.now { throw CourierError.timeout() }
        #if DEBUG
        Self.countTask()
        #endif
        let task = Task { try await work() }
        attach?(task)
        let watch = DeadlineWatch.shared.watch(until: deadline) { task.cancel() }
        let value: Result
        do {
            value = try await withTaskCancellationHandler {
                try await task.value
            } onCancel: {
                task.cancel()
            }
        } catch {
            throw Self.ended(watch, cancelledByCaller: Task.isCancelled, failure: error)
        }
        // Work that ended because the deadline cancelled it (a body cut short, a wait given up)
        // is a timeout, never a success — unless the caller itself was cancelled.
        if DeadlineWatch.shared.end(watch), !Task.isCancelled { throw CourierError.timeout(underlying: nil) }
        return value
    }

    /// Ends the watch of work that failed: the error it fails with is a timeout when the
    /// deadline had fired (and the caller had not cancelled, asked once the watch has ended),
    /// else the work's own.
    @inline(never)
    static func ended(_ watch: UInt64, cancelledByCaller: @autoclosure () -> Bool, failure error: any Error) -> any Error {
        guard DeadlineWatch.shared.end(watch), !cancelledByCaller() else { return error }
        if let failure = error as? CourierError, failure.kind == .timeout { return failure }
        var timeout = CourierError.timeout(underlying: error)
        timeout.keepAnswer(of: error)
        return timeout
    }
}

extension Deadline {
    /// Runs `work` in a task of its own, without a deadline, handing the task to `attach` (so
    /// it can be cancelled from elsewhere); cancelled with the caller.
    static func runCancellable<Result: Sendable>(
        attach: (Task<Result, any Error>) -> Void, _ work: @escaping @Sendable () async throws -> Result
    ) async throws -> Result {
        if Task.isCancelled { throw CourierError.cancelled() }
        #if DEBUG
        Self.countTask()
        #endif
        let task = Task { try await work() }
        attach(task)
        return try await withTaskCancellationHandler {
            try await task.value
        } onCancel: {
            task.cancel()
        }
    }
}

/// One thread that watches every running deadline of the process and fires the ones that pass.
///
/// Requests in flight are few (hundreds at most), so the thread scans them all, at most ten
/// times a second and only while some are watched: a deadline fires within about 0.1 s of its
/// time. Starting and ending a watch is a dictionary insert and remove under a lock. A deadline
/// that passes is fired on a short-lived thread of its own, never on the watch thread itself.
final class DeadlineWatch: @unchecked Sendable {
    static let shared = DeadlineWatch()

    private struct Entry {
        /// The deadline as a time since ``FixedInstant/reference`` (a fixed-layout value).
        var deadline: Duration
        var fire: @Sendable () -> Void
    }

    private let condition = NSCondition()
    // Guarded by `condition`.
    private var entries: [UInt64: Entry] = [:]
    private var fired: Set<UInt64> = []
    private var nextID: UInt64 = 0
    private var started = false
    /// Threads firing deadlines now.
    private var firing = 0

    /// How many threads may fire deadlines at once, one deadline each.
    static let maxFiring = 32

    /// `due` split over at most `threads` batches (one at least): one deadline each, the last
    /// batch the rest.
    static func batches<Item>(of due: [Item], threads: Int) -> [ArraySlice<Item>] {
        guard !due.isEmpty else { return [] }
        let singles = max(0, min(due.count, threads) - 1)
        var batches = (0..<singles).map { due[$0...$0] }
        batches.append(due[singles...])
        return batches
    }

    /// Starts watching; `fire` runs on a short-lived thread once `deadline` has passed.
    func watch(until deadline: ContinuousClock.Instant, fire: @escaping @Sendable () -> Void) -> UInt64 {
        self.condition.lock()
        defer { self.condition.unlock() }
        self.nextID &+= 1
        let id = self.nextID
        self.entries[id] = Entry(deadline: FixedInstant.offset(of: deadline), fire: fire)
        if !self.started {
            self.started = true
            let thread = Thread { [unowned self] in self.loop() }
            thread.name = "courier-deadlines"
            thread.start()
        }
        if self.entries.count == 1 { self.condition.signal() }
        return id
    }

    /// Stops watching; returns whether the deadline had fired.
    func end(_ id: UInt64) -> Bool {
        // The entry goes after the lock is let go: its closure may hold the last reference to
        // what a deadline ends (a task and its result), whose release may run other code.
        var removed: Entry?
        self.condition.lock()
        removed = self.entries.removeValue(forKey: id)
        let fired = !self.fired.isEmpty && self.fired.remove(id) != nil
        self.condition.unlock()
        _ = removed
        return fired
    }

    private func loop() {
        while true {
            self.condition.lock()
            while self.entries.isEmpty { self.condition.wait() }
            let now = FixedInstant.offset(of: ContinuousClock.now)
            var due: [@Sendable () -> Void] = []
            for (id, entry) in self.entries where entry.deadline <= now {
                due.append(entry.fire)
                self.entries[id] = nil
                self.fired.insert(id)
            }
            // Each deadline on a thread of its own while fewer than `maxFiring` fire; past that,
            // the rest of the scan's deadlines share one more thread.
            let batches = Self.batches(of: due, threads: max(1, Self.maxFiring - self.firing))
            self.firing += batches.count
            self.condition.unlock()
            // Firing cancels a task, which runs its cancellation handlers on the firing thread:
            // a middleware's, or a transport's, and one of them may block. So each deadline fires
            // on a thread of its own: a handler that blocks holds up neither the watch nor any
            // other deadline, even one that passed at the same moment (up to `maxFiring` threads
            // at once; beyond them, the deadlines of one scan share a thread). Dispatch's global
            // queue is no help here: on Linux its few threads can all be blocked, and the work
            // queued behind them waits (measured with the seam test). A handler that never
            // returns keeps its thread, so with `maxFiring` of them stuck, each later scan that
            // finds passed deadlines still starts one more.
            for batch in batches {
                let thread = Thread { [unowned self] in
                    for fire in batch { fire() }
                    self.condition.lock()
                    self.firing -= 1
                    self.condition.unlock()
                }
                thread.name = "courier-deadline-fire"
                thread.start()
            }
            Thread.sleep(forTimeInterval: 0.1)
        }
    }
}
