import Foundation

/// This caller's deadline (the endpoint's timeout, else the client's) over everything
/// below it — queueing, middleware waits, retries and their backoff, redirects, the exchange,
/// the whole body and decoding — on every transport and for each HTTP/2 stream on its own.
///
/// When it passes, the work below is cancelled and the caller gets kind `timeout`: once the
/// cancellation handlers have run when it waits for a shared request, and otherwise once the
/// cancelled work has ended. Both transports end an exchange at once when cancelled (the
/// URLSession one cancels its platform task off the caller's thread, as that can wait for a name
/// lookup); a middleware's work that does not end when cancelled, or a cancellation handler of
/// its that blocks, holds the caller past its deadline. Each caller
/// has its own: a deduplicated joiner with a short deadline times out alone while the others go
/// on. For streamed exchanges (``Client/stream(_:)``, downloads) it covers the wait for the
/// response head only; their bodies may legitimately last for hours, and a stalled one is ended
/// by ``Client/Configuration/bodyIdleTimeout``: each read must bring a byte within it, for each
/// stream on its own (an HTTP/2 stream that stalls times out even while its connection is busy).
///
/// An exchange that deduplication will share (a collected GET or HEAD, by default) has its
/// deadline enforced where it waits — as a waiter of the shared request, which the
/// deduplicator resumes with kind `timeout` when the deadline passes — and so runs without a
/// task of its own; the stages between (decoding, the cache lookup) do not wait. An exchange
/// that runs alone in a task Courier made for it (``Client/start(_:priority:)``,
/// ``Client/upload(_:)``) runs the stages below in that task, which the deadline and `cancelAll`
/// cancel. Every other exchange runs in a task of its own that the deadline cancels.
struct DeadlineStage: PipelineStage {
    let bodyIdleTimeout: Duration?
    let deduplication: DeduplicationConfiguration
    let lifecycle: Lifecycle
    var name: String { "deadline" }

    @inline(__always)
    func run<Next: PipelineNext>(_ exchange: RequestExchange, next: Next) async throws -> Outcome {
        // Each way of running is a function of its own, so the async frame of `run` holds none of
        // their values.
        let outcome: Outcome
        // A deadline decades away (a hostile or careless timeout) is no deadline: the clock's
        // sleep cannot even represent it.
        if let deadline = exchange.request.deadline, deadline - ContinuousClock.now < Deadline.longest {
            if self.waitsOnlyAsAWaiter(exchange) {
                outcome = try await self.asWaiter(exchange, until: deadline, next: next)
            } else {
                outcome = try await self.inTask(exchange, until: deadline, next: next)
            }
        } else if self.waitsOnlyAsAWaiter(exchange) {
            if Task.isCancelled { throw CourierError.cancelled() }
            outcome = try await next(exchange)
        } else {
            outcome = try await self.inTask(exchange, until: nil, next: next)
        }
        guard exchange.mode.isStream else { return outcome }
        return self.idleLimited(outcome)
    }

    /// Runs the exchange where its only wait is as a waiter of a shared request (which the
    /// deduplicator ends at the deadline); a timeout then names this stage.
    @inline(never)
    private func asWaiter<Next: PipelineNext>(
        _ exchange: RequestExchange, until deadline: ContinuousClock.Instant, next: Next
    ) async throws -> Outcome {
        // As in a task of its own (``Deadline/run(until:attach:_:)``): a caller cancelled
        // already starts nothing.
        if Task.isCancelled { throw CourierError.cancelled() }
        if deadline <= ContinuousClock.now { throw CourierError.timeout() }
        do {
            return try await next(exchange)
        } catch var error as CourierError where error.kind == .timeout && ContinuousClock.now >= deadline {
            error.context?.stage = self.name
            throw error
        }
    }

    /// Runs the exchange in a task of its own, which the deadline (if any) and `cancelAll` cancel.
    @inline(never)
    private func inTask<Next: PipelineNext>(
        _ exchange: RequestExchange, until deadline: ContinuousClock.Instant?, next: Next
    ) async throws -> Outcome {
        let lifecycle = self.lifecycle
        let ticket = exchange.lifecycleTicket
        if let control = exchange.control, control.runsInOwnTask {
            return try await self.inOwnTask(exchange, control: control, until: deadline, next: next)
        }
        guard let deadline else {
            // No deadline, but a task of its own all the same, so `cancelAll` can reach the work.
            return try await Deadline.runCancellable(attach: { task in lifecycle.attach(ticket) { _ in task.cancel() } }) {
                try await next(exchange)
            }
        }
        return try await Deadline.run(until: deadline, attach: { task in lifecycle.attach(ticket) { _ in task.cancel() } }) {
            try await next(exchange)
        }
    }

    /// Runs the exchange in the task the request was started in (``RequestControl/runsInOwnTask``),
    /// which the deadline (if any) and `cancelAll` cancel: the same ends as ``inTask(_:until:next:)``
    /// without a second task.
    @inline(never)
    private func inOwnTask<Next: PipelineNext>(
        _ exchange: RequestExchange, control: RequestControl, until deadline: ContinuousClock.Instant?, next: Next
    ) async throws -> Outcome {
        // As in a task of its own (``Deadline/run(until:attach:_:)``): a caller cancelled
        // already starts nothing.
        if Task.isCancelled { throw CourierError.cancelled() }
        if let deadline, deadline <= ContinuousClock.now { throw CourierError.timeout() }
        self.lifecycle.attach(exchange.lifecycleTicket) { _ in control.cancelOwnTask() }
        let watch = deadline.map { DeadlineWatch.shared.watch(until: $0) { control.cancelOwnTask() } }
        let outcome: Outcome
        do {
            outcome = try await next(exchange)
        } catch {
            guard let watch else { throw error }
            throw Deadline.ended(watch, cancelledByCaller: control.isCancelledByCaller, failure: error)
        }
        // Work that ended because the deadline cancelled it is a timeout, never a success —
        // unless the caller itself cancelled the request.
        if let watch, DeadlineWatch.shared.end(watch), !control.isCancelledByCaller {
            outcome.response.body.cancel()
            throw CourierError.timeout(underlying: nil)
        }
        return outcome
    }

    /// A streamed outcome whose body fails with kind `timeout` when a read brings nothing for
    /// the body idle timeout.
    @inline(never)
    private func idleLimited(_ outcome: Outcome) -> Outcome {
        guard let idle = self.bodyIdleTimeout, idle < Deadline.longest, outcome.response.body.bytes == nil else { return outcome }
        var limited = outcome
        limited.response.body = outcome.response.body.idleLimited(idle)
        return limited
    }
}

extension DeadlineStage {
    /// Whether every wait below this stage is one the deduplicator bounds by the deadline: the
    /// exchange is collected, will be shared (the build stage gives a key only to an exchange
    /// that ``DeduplicationStage/shares(_:)``), and is no prefetch (which may wait for the
    /// constrained gate).
    func waitsOnlyAsAWaiter(_ exchange: RequestExchange) -> Bool {
        exchange.mode == .collect && self.deduplication.isEnabled && exchange.key != nil && !exchange.endpoint.isPrefetch
    }
}
