import Foundation

/// The client's constrained (Low Data Mode) switch, and the prefetches waiting for it to turn off.
final class ConstrainedGate: Sendable {
    private struct State {
        var isOn = false
        var waiters: [UInt64: (continuation: CheckedContinuation<Void, any Error>, lifecycleTicket: UInt64?)] = [:]
        var nextID: UInt64 = 0
        /// Why deferred requests fail from now on (the client shut down); `nil` while open.
        var closed: CourierError?
    }

    private let state = Locked(State())

    var isOn: Bool { self.state.withLock { $0.isOn } }

    /// How many deferred requests wait for the client to be no longer constrained (for tests).
    var waitingCount: Int { self.state.withLock { $0.waiters.count } }

    func set(_ on: Bool) {
        let released = self.state.withLock { state -> [CheckedContinuation<Void, any Error>] in
            state.isOn = on
            guard !on else { return [] }
            defer { state.waiters.removeAll() }
            return state.waiters.values.map(\.continuation)
        }
        for waiter in released { waiter.resume() }
    }

    /// Fails every deferred request waiting now, and every one deferred from now on, with
    /// `error`. `before` gets the lifecycle tickets of those that were waiting before they are
    /// woken (so their tickets are marked while they still run); returns what it returns.
    func close(with error: CourierError, before: ([UInt64]) -> Int) -> Int {
        let waiting = self.state.withLock { state in
            state.closed = error
            defer { state.waiters.removeAll() }
            return Array(state.waiters.values)
        }
        let result = before(waiting.compactMap(\.lifecycleTicket))
        for waiter in waiting { waiter.continuation.resume(throwing: error) }
        return result
    }

    /// Returns at once when not constrained; otherwise refuses or waits, by policy. A waiting
    /// request is known by its `lifecycleTicket` when the gate closes.
    func admit(policy: ConstrainedPolicy, lifecycleTicket: UInt64? = nil) async throws {
        guard self.isOn else { return }
        switch policy {
        case .refuse:
            throw CourierError(.constrained, "a prefetch request was refused because the client is constrained (Low Data Mode)")
        case .defer:
            let id = self.state.withLock { state -> UInt64 in
                state.nextID += 1
                return state.nextID
            }
            try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                    let (proceed, closed): (Bool, CourierError?) = self.state.withLock { state in
                        if let closed = state.closed { return (true, closed) }
                        guard state.isOn, !Task.isCancelled else { return (true, nil) }
                        state.waiters[id] = (continuation, lifecycleTicket)
                        return (false, nil)
                    }
                    if let closed {
                        continuation.resume(throwing: closed)
                    } else if proceed {
                        if Task.isCancelled { continuation.resume(throwing: CourierError.cancelled()) } else { continuation.resume() }
                    }
                }
            } onCancel: {
                let waiter = self.state.withLock { $0.waiters.removeValue(forKey: id) }
                waiter?.continuation.resume(throwing: CourierError.cancelled())
            }
        }
    }
}
