import Foundation

/// The start and the end of each caller's request, as events for the client's monitors
/// (``EventMonitor``): "started" on the way down; "finished", "failed" or "cancelled" on the way
/// up, with status, source, bytes, HTTP version and timings. The log lines are one monitor
/// (``LogMonitor``). A stream's request "finishes" when its head arrives. A download reports its
/// own start and end, once for all its rounds (a resumed body can take several exchanges, one
/// of them answered 416), so this stage reports nothing for an exchange of mode `download`.
struct ObserveStage: PipelineStage {
    let events: EventHub
    /// The client's redactor when it hides more (or otherwise) than the standard one, with which
    /// the URL of a failure's context is written.
    let ownRedactor: Redactor?
    var name: String { "observe" }

    init(events: EventHub, redactor: Redactor = .standard) {
        self.events = events
        self.ownRedactor = redactor.isStandard ? nil : redactor
    }

    @inline(__always)
    func run<Next: PipelineNext>(_ exchange: RequestExchange, next: Next) async throws -> Outcome {
        let reports = exchange.mode != .download
        if reports { self.events.emit(exchange.request) { $0.requestStarted($1) } }
        let outcome: Outcome
        do {
            outcome = try await next(exchange)
        } catch {
            throw self.failed(exchange, error, reports: reports)
        }
        return self.finished(outcome, exchange)
    }

    /// Tells the monitors the request failed (or was cancelled), and returns the error the
    /// caller gets: its context's URL (the hop that failed, as the standard redactor wrote it)
    /// hidden with the client's own redactor as well. Synchronous and apart from `run`, so that
    /// its values stay out of the async frame every request allocates.
    @inline(never)
    private func failed(_ exchange: RequestExchange, _ error: any Error, reports: Bool) -> any Error {
        var error = error
        if let redactor = self.ownRedactor, var failure = error as? CourierError, var context = failure.context,
            context.requestID == exchange.request.id
        {
            context.url = redactor.redact(urlString: context.url)
            failure.context = context
            failure.redactor = redactor
            error = failure
        }
        if reports { self.events.failed(exchange.request, failure: Self.failure(error), start: exchange.start, record: exchange.record) }
        return error
    }

    /// The error a request's monitors are told it failed with: a transport failure of a
    /// cancelled task is a cancellation.
    static func failure(_ error: any Error) -> CourierError {
        var failure = CourierError.wrap(error)
        if Task.isCancelled, failure.kind == .transport {
            let context = failure.context
            failure = .cancelled(underlying: failure)
            failure.context = context
        }
        return failure
    }

    /// The outcome with the request, duration and record filled in (its URL follows from them);
    /// the monitors told it finished.
    @inline(never)
    private func finished(_ outcome: consuming Outcome, _ exchange: RequestExchange) -> Outcome {
        outcome.duration = .now - exchange.start
        outcome.request = exchange.request
        outcome.record = exchange.record
        guard self.events.isActive, exchange.mode != .download else { return outcome }
        let fromStore = outcome.source == .cache || outcome.source == .stale
        let result = EventHub.result(
            response: outcome.response.head, body: exchange.mode.isStream ? nil : outcome.body,
            bodySize: exchange.mode.isStream ? 0 : outcome.body.count,
            version: fromStore ? nil : outcome.response.version,
            source: outcome.source, age: outcome.age, staleReason: outcome.staleReason, start: exchange.start, url: outcome.urlString,
            record: exchange.record, delivery: exchange.mode.isStream ? .streaming : .collected
        )
        self.events.emit(exchange.request) { $0.requestFinished($1, result: result) }
        return outcome
    }
}
