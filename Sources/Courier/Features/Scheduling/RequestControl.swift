import Foundation

/// The live settings of one started request: its priority, which may change while it waits.
final class RequestControl: Sendable {
    private struct State {
        var priority: RequestPriority
        var observers: [UInt64: @Sendable (RequestPriority) -> Void] = [:]
        var nextObserver: UInt64 = 0
        /// Cancels the request's own task, once it is known (``adoptTask(cancel:)``).
        var cancelTask: (@Sendable () -> Void)?
        /// Whether the deadline or `cancelAll` asked for the task to be cancelled (before it was
        /// known, the request is then cancelled as soon as it is).
        var taskCancelRequested = false
        /// Whether the request's caller cancelled it (its handle's `cancel()`).
        var cancelledByCaller = false
        /// Whether the request's own task has returned (its canceller is then not kept).
        var taskEnded = false
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
    /// Whether the request runs alone in a task Courier made for it (``Client/start(_:priority:)``,
    /// ``Client/upload(_:)``): the deadline stage then runs the stages below it in that task, and
    /// ends them at the deadline or on `cancelAll` by cancelling it (``cancelOwnTask()``), instead
    /// of starting a task of its own. Never set for a control that runs more than one exchange
    /// (a download's rounds, ``Client/updates(_:)``): a task cancelled by one exchange's deadline
    /// would end the next.
    let runsInOwnTask: Bool

    init(priority: RequestPriority, order: UInt64? = nil, lifecycleTicket: UInt64? = nil, runsInOwnTask: Bool = false) {
        self.state = Locked(State(priority: priority))
        self.order = order
        self.lifecycleTicket = lifecycleTicket
        self.runsInOwnTask = runsInOwnTask
    }

    /// Hands over the way to cancel the request's own task, once it is made; cancels it at once
    /// when the deadline or `cancelAll` asked for that before (its task may run before this call).
    func adoptTask(cancel: @escaping @Sendable () -> Void) {
        let cancelNow = self.state.withLock { state -> Bool in
            guard !state.taskEnded else { return false }
            state.cancelTask = cancel
            return state.taskCancelRequested
        }
        if cancelNow { cancel() }
    }

    /// Cancels the request's own task (for its deadline or `cancelAll`), now or once it is adopted.
    func cancelOwnTask() {
        let cancel = self.state.withLock { state -> (@Sendable () -> Void)? in
            state.taskCancelRequested = true
            return state.cancelTask
        }
        cancel?()
    }

    /// Records that the caller cancelled the request (the task is cancelled by the handle itself).
    func cancelByCaller() {
        self.state.withLock { $0.cancelledByCaller = true }
    }

    /// Whether the caller cancelled the request: its own task may be cancelled by its deadline
    /// or `cancelAll` too, which the caller did not ask for.
    var isCancelledByCaller: Bool { self.state.withLock { $0.cancelledByCaller } }

    var priority: RequestPriority { self.state.withLock { $0.priority } }

    /// Ends the lifecycle ticket taken when the request was started, if the lifecycle stage has
    /// not (a request that failed before reaching it must not leave it behind), and lets go of
    /// its task's canceller (which holds the task, whose work holds this control): called by
    /// the request's task as it returns.
    func endTicket(in lifecycle: Lifecycle) {
        if let ticket = self.lifecycleTicket { lifecycle.end(ticket) }
        if self.runsInOwnTask {
            self.state.withLock { state in
                state.cancelTask = nil
                state.taskEnded = true
            }
        }
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
