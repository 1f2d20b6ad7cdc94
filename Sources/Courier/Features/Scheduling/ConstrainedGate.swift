import Foundation

/// The client's constrained (Low Data Mode) switch, and the prefetches waiting for it to turn off.
final class ConstrainedGate: Sendable {
    private struct State {
        var isOn = false
        var waiters: [UInt64: CheckedContinuation<Void, any Error>] = [:]
        var nextID: UInt64 = 0
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
            return Array(state.waiters.values)
        }
        for waiter in released { waiter.resume() }
    }

    /// Returns at once when not constrained; otherwise refuses or waits, by policy.
    func admit(policy: ConstrainedPolicy) async throws {
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
                    let proceed: Bool = self.state.withLock { state in
                        guard state.isOn, !Task.isCancelled else { return true }
                        state.waiters[id] = continuation
                        return false
                    }
                    if proceed {
                        if Task.isCancelled { continuation.resume(throwing: CourierError.cancelled()) } else { continuation.resume() }
                    }
                }
            } onCancel: {
                let waiter = self.state.withLock { $0.waiters.removeValue(forKey: id) }
                waiter?.resume(throwing: CourierError.cancelled())
            }
        }
    }
}
