import Foundation

/// The live settings of one started request: its priority, which may change while it waits.
final class RequestControl: Sendable {
    private struct State {
        var priority: RequestPriority
        var observers: [UInt64: @Sendable (RequestPriority) -> Void] = [:]
        var nextObserver: UInt64 = 0
    }

    private let state: Locked<State>
    /// Held while a change is handed to the observers: two callers setting the priority at
    /// once hand theirs over one after the other, so the last change made is the last each
    /// observer hears (else the scheduler could keep the older value). Observers do not set a
    /// priority themselves.
    private let delivery = NSLock()
    /// The request's place in line, taken when it was started (``RequestScheduler/makeOrder()``).
    let order: UInt64?
    /// The lifecycle ticket taken when it was started (``Client/start(_:priority:)``), so that
    /// ``Client/cancelAll(reason:)`` reaches it before its task has run; `nil` when the client
    /// was shut down by then (its lifecycle stage then refuses it) or it was not started that way.
    let lifecycleTicket: UInt64?

    init(priority: RequestPriority, order: UInt64? = nil, lifecycleTicket: UInt64? = nil) {
        self.state = Locked(State(priority: priority))
        self.order = order
        self.lifecycleTicket = lifecycleTicket
    }

    var priority: RequestPriority { self.state.withLock { $0.priority } }

    /// Ends the lifecycle ticket taken when the request was started, if the lifecycle stage has
    /// not (a request that failed before reaching it must not leave it behind).
    func endTicket(in lifecycle: Lifecycle) {
        if let ticket = self.lifecycleTicket { lifecycle.end(ticket) }
    }

    /// How many observers are registered (for tests: none should stay once a request ended).
    var observerCount: Int { self.state.withLock { $0.observers.count } }

    /// Calls `observer` with every later change, until ``removeObserver(_:)`` with the id returned.
    @discardableResult
    func onPriorityChange(_ observer: @escaping @Sendable (RequestPriority) -> Void) -> UInt64 {
        self.state.withLock { state in
            state.nextObserver += 1
            state.observers[state.nextObserver] = observer
            return state.nextObserver
        }
    }

    /// Stops calling an observer (once what it moves no longer waits).
    func removeObserver(_ id: UInt64) {
        self.state.withLock { _ = $0.observers.removeValue(forKey: id) }
    }

    func setPriority(_ priority: RequestPriority) {
        self.delivery.lock()
        defer { self.delivery.unlock() }
        let observers = self.state.withLock { state -> [@Sendable (RequestPriority) -> Void] in
            guard state.priority != priority else { return [] }
            state.priority = priority
            return Array(state.observers.values)
        }
        for observer in observers { observer(priority) }
    }
}
