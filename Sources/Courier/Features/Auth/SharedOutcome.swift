/// A result that many requests wait for (a token refresh, a prerequisite, a sign-in), where each
/// wait ends on its own when its task is cancelled or its deadline passes.
///
/// Awaiting a `Task`'s value directly ignores the waiter's cancellation; here a waiter that is
/// cancelled (before or during its wait) fails with kind `cancelled`, and one whose deadline
/// passes fails with kind `timeout`, without affecting the work or the other waiters.
final class SharedOutcome<Value: Sendable>: Sendable {
    private enum Waiter {
        /// Registered; its continuation is not installed yet.
        case pending
        /// Suspended on its continuation.
        case waiting(CheckedContinuation<Value, any Error>)
        /// Ended (cancelled or timed out) before its continuation was installed.
        case ended(CourierError)
    }

    private struct State {
        var result: Result<Value, any Error>?
        var waiters: [UInt64: Waiter] = [:]
        var nextID: UInt64 = 0
    }

    private enum Registration {
        case ready(Result<Value, any Error>)
        case waiting(UInt64)
    }

    private let state = Locked(State())

    init() {}

    /// Delivers the result to every waiter, and to later ones; only the first call counts.
    func complete(_ result: Result<Value, any Error>) {
        let resumed = self.state.withLock { state -> [CheckedContinuation<Value, any Error>] in
            guard state.result == nil else { return [] }
            state.result = result
            var continuations: [CheckedContinuation<Value, any Error>] = []
            for (id, waiter) in state.waiters {
                if case .waiting(let continuation) = waiter {
                    continuations.append(continuation)
                    state.waiters[id] = nil
                }
            }
            return continuations
        }
        for continuation in resumed { continuation.resume(with: result) }
    }

    /// How many callers are suspended waiting for the result (for tests).
    var waitingCount: Int {
        self.state.withLock { state in
            state.waiters.values.filter { if case .waiting = $0 { true } else { false } }.count
        }
    }

    /// Waits for the result; `what` names the awaited thing in a timeout's message.
    ///
    /// - Throws: the result's error; ``CourierError`` of kind `cancelled` when the calling task is
    ///   (or becomes) cancelled first, or `timeout` when `deadline` passes first.
    func value(deadline: ContinuousClock.Instant?, waitingFor what: String) async throws -> Value {
        if let interruption = Self.interruption(deadline: deadline, waitingFor: what) { throw interruption }
        let registration = self.state.withLock { state -> Registration in
            if let result = state.result { return .ready(result) }
            state.nextID += 1
            state.waiters[state.nextID] = .pending
            return .waiting(state.nextID)
        }
        let id: UInt64
        switch registration {
        case .ready(let result): return try result.get()
        case .waiting(let waiter): id = waiter
        }
        // A deadline beyond what the clock's sleep can represent is no deadline.
        var timed: ContinuousClock.Instant?
        if let deadline, deadline - ContinuousClock.now < Deadline.longest { timed = deadline }
        let timer = timed.map { deadline in
            Task { [weak self] in
                guard (try? await Task.sleep(until: deadline, clock: .continuous)) != nil else { return }
                self?.end(id, with: Self.timeout(what))
            }
        }
        defer { timer?.cancel() }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Value, any Error>) in
                let now = self.state.withLock { state -> Result<Value, any Error>? in
                    switch state.waiters[id] {
                    case .ended(let error):
                        state.waiters[id] = nil
                        return .failure(error)
                    case .pending:
                        if let result = state.result {
                            state.waiters[id] = nil
                            return result
                        }
                        state.waiters[id] = .waiting(continuation)
                        return nil
                    case .waiting, nil:
                        // Not reachable: only this call installs the continuation.
                        return state.result ?? .failure(CourierError.cancelled())
                    }
                }
                if let now { continuation.resume(with: now) }
            }
        } onCancel: {
            self.end(id, with: CourierError.cancelled())
        }
    }

    /// Ends one waiter's wait early with `error`, if it is still waiting.
    private func end(_ id: UInt64, with error: CourierError) {
        let continuation = self.state.withLock { state -> CheckedContinuation<Value, any Error>? in
            switch state.waiters[id] {
            case .pending:
                state.waiters[id] = .ended(error)
                return nil
            case .waiting(let continuation):
                state.waiters[id] = nil
                return continuation
            case .ended, nil:
                return nil
            }
        }
        continuation?.resume(throwing: error)
    }

    /// The error a wait would end with right away: `cancelled` when the calling task is
    /// cancelled, `timeout` when `deadline` has passed; `nil` when it may wait.
    static func interruption(deadline: ContinuousClock.Instant?, waitingFor what: String) -> CourierError? {
        if Task.isCancelled { return CourierError.cancelled() }
        if let deadline, ContinuousClock.now >= deadline { return Self.timeout(what) }
        return nil
    }

    private static func timeout(_ what: String) -> CourierError {
        CourierError.timeout("the request's deadline passed while waiting for \(what)")
    }
}
