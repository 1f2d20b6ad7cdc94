import Foundation

/// A client's lifecycle: which requests are running (to cancel them all), whether network
/// requests are held (suspended: the client's scheduler hands out no slot, so held requests wait
/// in its queue and leave in its order), and whether the client still takes requests (shut down).
///
/// Each caller's request holds a ticket from the lifecycle stage until it returns; the stage
/// that runs the request's work in a task of its own (the deadline stage), or the deduplicator
/// for a request that waits on a shared one, attaches a canceller to the ticket.
final class Lifecycle: Sendable {
    private struct Entry {
        // Nearly every request attaches one canceller (its deadline stage's task), so the first
        // is kept apart and the array, one allocation more per request, is made only for more.
        var first: (@Sendable (CourierError) -> Void)?
        var more: [@Sendable (CourierError) -> Void] = []
        var reason: String?

        mutating func add(_ cancel: @escaping @Sendable (CourierError) -> Void) {
            if self.first == nil { self.first = cancel } else { self.more.append(cancel) }
        }

        /// The cancellers attached so far, removed from the entry.
        mutating func takeCancellers() -> [@Sendable (CourierError) -> Void] {
            var all: [@Sendable (CourierError) -> Void] = self.first.map { [$0] } ?? []
            all += self.more
            self.first = nil
            self.more = []
            return all
        }
    }

    private struct State {
        var nextTicket: UInt64 = 0
        var running: [UInt64: Entry] = [:]
        var suspended = false
        var shutDown = false
    }

    private let state = Locked(State())
    /// The scheduler that holds requests while the client is suspended.
    private let scheduler: RequestScheduler

    init(scheduler: RequestScheduler) {
        self.scheduler = scheduler
    }

    /// A ticket for a new request; throws kind `cancelled` once the client is shut down.
    func begin() throws -> UInt64 {
        try self.state.withLock { state in
            guard !state.shutDown else { throw CourierError(.cancelled, "the client is shut down") }
            state.nextTicket += 1
            state.running[state.nextTicket] = Entry()
            return state.nextTicket
        }
    }

    /// Ends a ticket; returns the reason it was cancelled with, if ``cancelAll(reason:)`` did.
    @discardableResult
    func end(_ ticket: UInt64) -> String? {
        // The entry is released after the lock: a canceller may hold the last reference to the
        // request's task, and with it a response whose release ends a body, frees a scheduler
        // slot and tells the event monitors, which may call back into this lifecycle.
        let removed = self.state.withLock { state -> Entry? in
            guard let index = state.running.index(forKey: ticket) else { return nil }
            return state.running.remove(at: index).value
        }
        return removed?.reason
    }

    /// Where a ticket stands: still held (and whether ``cancelAll(reason:)`` cancelled it), or ended.
    enum TicketState: Equatable {
        case running
        case cancelled(reason: String)
        case ended
    }

    /// Where `ticket` stands now.
    func state(of ticket: UInt64) -> TicketState {
        self.state.withLock { state in
            guard let entry = state.running[ticket] else { return .ended }
            return entry.reason.map { .cancelled(reason: $0) } ?? .running
        }
    }

    /// Adds a way to cancel the ticket's work; called at once if the ticket is already cancelled.
    func attach(_ ticket: UInt64?, _ cancel: @escaping @Sendable (CourierError) -> Void) {
        guard let ticket else { return }
        let reason = self.state.withLock { state -> String? in
            guard let index = state.running.index(forKey: ticket) else { return nil }
            if let reason = state.running.values[index].reason { return reason }
            state.running.values[index].add(cancel)
            return nil
        }
        if let reason { cancel(CourierError(.cancelled, reason)) }
    }

    /// Cancels every running request with `reason`; returns how many.
    @discardableResult
    func cancelAll(reason: String) -> Int {
        self.cancel(nil, reason: reason)
    }

    /// Cancels the running requests of `tickets` (every one when `nil`) not cancelled yet, with
    /// `reason`; returns how many.
    private func cancel(_ tickets: [UInt64]?, reason: String) -> Int {
        if let tickets, tickets.isEmpty { return 0 }
        let (cancellers, count) = self.state.withLock { state -> ([@Sendable (CourierError) -> Void], Int) in
            var cancellers: [@Sendable (CourierError) -> Void] = []
            var count = 0
            for key in tickets ?? Array(state.running.keys) where state.running[key] != nil && state.running[key]?.reason == nil {
                state.running[key]?.reason = reason
                cancellers += state.running[key]?.takeCancellers() ?? []
                count += 1
            }
            return (cancellers, count)
        }
        let error = CourierError(.cancelled, reason)
        for cancel in cancellers { cancel(error) }
        return count
    }

    var isSuspended: Bool { self.state.withLock { $0.suspended } }

    var runningCount: Int { self.state.withLock { $0.running.count } }

    /// Whether ``shutdown(grace:)`` has begun: new requests are refused.
    var isShutDown: Bool { self.state.withLock { $0.shutDown } }

    /// Holds network requests: the scheduler hands out no slot while the client reads as
    /// suspended (both change under this lock). A request granted a slot before goes on, as one
    /// already on the wire does.
    func suspend() {
        self.state.withLock { state in
            state.suspended = true
            self.scheduler.pause()
        }
    }

    /// Lets held requests go, in the scheduler's order: the highest priority first, then in the
    /// order they were called.
    func resume() {
        self.state.withLock { state in
            state.suspended = false
            self.scheduler.unpause()
        }
    }

    /// Refuses new requests from now on, lets `refused` end the waits that cannot end within the
    /// grace period (it hands their tickets to the function it gets, which cancels them and counts
    /// them, before it wakes them), waits up to `grace` for the running ones to end, then cancels
    /// the rest (and gives them up to five seconds to unwind); returns how many were cancelled. A
    /// caller cancelled meanwhile stops waiting: the rest are cancelled at once, and not waited for.
    func shutdown(grace: Duration, refused: (_ cancel: ([UInt64]) -> Int) -> Int = { _ in 0 }) async -> Int {
        self.state.withLock { $0.shutDown = true }
        self.resume()
        let ended = refused { self.cancel($0, reason: "the client is shut down") }
        let deadline = ContinuousClock.now + grace
        // (A sleep in a cancelled task throws at once: ignored, it made these loops spin.)
        while self.runningCount > 0, ContinuousClock.now < deadline {
            do { try await Task.sleep(for: .milliseconds(10)) } catch { break }
        }
        guard self.runningCount > 0 else { return ended }
        let cancelled = self.cancelAll(reason: "the client is shut down")
        let unwind = ContinuousClock.now + .seconds(5)
        while self.runningCount > 0, ContinuousClock.now < unwind {
            do { try await Task.sleep(for: .milliseconds(10)) } catch { break }
        }
        return ended + cancelled
    }
}
