import Foundation

/// Holds requests until the scheduler's limits allow them on the wire, highest priority first.
///
/// One scheduler belongs to one ``Client``. The decisions are made by ``SchedulerState``; this
/// type only parks and resumes tasks. A request that has a free slot starts without suspending.
package final class RequestScheduler: Sendable {
    private struct State {
        var decisions: SchedulerState
        var parked: [UInt64: Parked] = [:]
        var nextID: UInt64 = 0
        /// Priorities set for tickets not queued yet (a deduplicated request a higher-priority
        /// caller joined before it reached the scheduler): applied when the ticket arrives.
        var early: [UInt64: RequestPriority] = [:]
    }

    /// A queued ticket: its task's continuation once it has parked. `UnsafeContinuation`, not
    /// `CheckedContinuation`: the checked one is not a frozen type, so every dictionary operation
    /// on these entries went through the runtime's generic value witnesses, and it allocates a
    /// canary per park. Each continuation is resumed exactly once: only by whoever removes its
    /// entry from `parked`, under the lock (a release that starts it, or its task's cancellation).
    private enum Parked {
        case waiting(UnsafeContinuation<Void, any Error>?)
        case cancelled
    }

    private let state: Locked<State>

    package init(configuration: SchedulerConfiguration) {
        self.state = Locked(State(decisions: SchedulerState(configuration: configuration)))
    }

    /// A new ticket identifier.
    package func makeTicket() -> UInt64 {
        self.state.withLock { state in
            state.nextID += 1
            return state.nextID
        }
    }

    /// The next number in line, for a request being called now (see ``SchedulerState/makeOrder()``).
    package func makeOrder() -> UInt64 {
        self.state.withLock { $0.decisions.makeOrder() }
    }

    /// Waits until the request may start; throws kind `cancelled` if the task is cancelled while queued.
    ///
    /// Every successful `acquire` must be balanced by one ``release(host:)``.
    /// `onPark` is called (before waiting) when no slot is free.
    package func acquire(
        ticket: UInt64, host: String, priority: RequestPriority, order: UInt64? = nil, onPark: (@Sendable () -> Void)? = nil
    ) async throws {
        if self.tryAcquire(ticket: ticket, host: host, priority: priority, order: order) { return }
        onPark?()
        try await self.waitForSlot(ticket: ticket)
    }

    /// Takes a slot at once when one is free (`true`); else queues the ticket and returns
    /// `false`, and the caller must then wait with ``waitForSlot(ticket:)``. Synchronous, so a
    /// request that finds a slot free makes no async call for it.
    package func tryAcquire(ticket: UInt64, host: String, priority: RequestPriority, order: UInt64? = nil) -> Bool {
        self.state.withLock { state -> Bool in
            let now = ContinuousClock.now
            var priority = priority
            if !state.early.isEmpty, let set = state.early.removeValue(forKey: ticket) { priority = set }
            if state.decisions.submit(id: ticket, host: host, priority: priority, order: order, now: now) { return true }
            state.parked[ticket] = .waiting(nil)
            return false
        }
    }

    /// Waits for the slot of a ticket ``tryAcquire(ticket:host:priority:)`` queued; cancelling
    /// the task takes it out of the queue and throws kind `cancelled`.
    package func waitForSlot(ticket: UInt64) async throws {
        try await withTaskCancellationHandler {
            try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<Void, any Error>) in
                let resumeNow: Result<Void, any Error>? = self.state.withLock { state in
                    switch state.parked[ticket] {
                    case .waiting:
                        state.parked[ticket] = .waiting(continuation)
                        return nil
                    case .cancelled:
                        state.parked[ticket] = nil
                        return .failure(CourierError.cancelled())
                    case nil:
                        // Started between queueing and parking.
                        return .success(())
                    }
                }
                if let resumeNow { continuation.resume(with: resumeNow) }
            }
        } onCancel: {
            let continuation: UnsafeContinuation<Void, any Error>?? = self.state.withLock { state in
                guard case .waiting(let continuation) = state.parked[ticket], state.decisions.cancel(id: ticket) else { return nil }
                if continuation == nil {
                    state.parked[ticket] = .cancelled
                } else {
                    state.parked[ticket] = nil
                }
                return .some(continuation)
            }
            if case .some(.some(let continuation)) = continuation {
                continuation.resume(throwing: CourierError.cancelled())
            }
        }
    }

    /// Frees the slot of a finished request and starts the next ones.
    package func release(host: String, spokeHTTP2: Bool = false) {
        let ready = self.state.withLock { state -> [UnsafeContinuation<Void, any Error>] in
            if spokeHTTP2 { state.decisions.markHTTP2(host) }
            return Self.unpark(state.decisions.finish(host: host, now: .now), in: &state)
        }
        for continuation in ready { continuation.resume() }
    }

    /// Hands out no slot until ``unpause()``: requests queue in their place in line (a suspended
    /// client). Requests holding a slot keep it.
    package func pause() {
        self.state.withLock { $0.decisions.pause(now: .now) }
    }

    /// Hands out slots again: the queued requests start as the limits allow, highest priority
    /// first, then in the order they were called.
    package func unpause() {
        let ready = self.state.withLock { state in Self.unpark(state.decisions.unpause(now: .now), in: &state) }
        for continuation in ready { continuation.resume() }
    }

    /// The continuations of the parked tickets that start now, taken out of `parked`.
    private static func unpark(_ started: [UInt64], in state: inout State) -> [UnsafeContinuation<Void, any Error>] {
        var continuations: [UnsafeContinuation<Void, any Error>] = []
        for id in started {
            if case .waiting(let continuation?) = state.parked.removeValue(forKey: id) {
                continuations.append(continuation)
            }
        }
        return continuations
    }

    /// Changes the priority of a queued request; no effect once it has started.
    func reprioritize(ticket: UInt64, to priority: RequestPriority) {
        self.state.withLock { state in
            guard !state.decisions.reprioritize(id: ticket, to: priority) else { return }
            // Not queued: kept for when it is. (A ticket already running never comes back for
            // it, nor one whose request failed before the scheduler; such entries are dropped
            // wholesale past a few thousand.)
            if state.early.count >= 4096 { state.early.removeAll() }
            state.early[ticket] = priority
        }
    }

    /// How many priority changes wait for a ticket that has not reached the scheduler yet.
    package var pendingPriorityChanges: Int { self.state.withLock { $0.early.count } }

    /// What is queued and in flight now.
    package var snapshot: TrafficSnapshot {
        self.state.withLock { $0.decisions.snapshot }
    }
}
