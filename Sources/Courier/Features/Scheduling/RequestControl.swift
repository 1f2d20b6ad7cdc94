/// The live settings of one started request: its priority, which may change while it waits.
final class RequestControl: Sendable {
    private struct State {
        var priority: RequestPriority
        var observers: [@Sendable (RequestPriority) -> Void] = []
    }

    private let state: Locked<State>
    /// The request's place in line, taken when it was started (``RequestScheduler/makeOrder()``).
    let order: UInt64?

    init(priority: RequestPriority, order: UInt64? = nil) {
        self.state = Locked(State(priority: priority))
        self.order = order
    }

    var priority: RequestPriority { self.state.withLock { $0.priority } }

    /// Calls `observer` with every later change.
    func onPriorityChange(_ observer: @escaping @Sendable (RequestPriority) -> Void) {
        self.state.withLock { $0.observers.append(observer) }
    }

    func setPriority(_ priority: RequestPriority) {
        let observers = self.state.withLock { state -> [@Sendable (RequestPriority) -> Void] in
            guard state.priority != priority else { return [] }
            state.priority = priority
            return state.observers
        }
        for observer in observers { observer(priority) }
    }
}
