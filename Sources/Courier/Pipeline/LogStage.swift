import Foundation

/// Stage 3: one log line when the request starts and one when it ends (request id, endpoint name,
/// method, redacted URL, status, duration, bytes, HTTP version, outcome).
struct LogStage: PipelineStage {
    let log: RequestLog
    var name: String { "log" }

    func run(_ exchange: RequestExchange, next: @escaping PipelineStageNext) async throws -> Outcome {
        self.log.started(exchange.request)
        var outcome: Outcome
        do {
            outcome = try await next(exchange)
        } catch {
            let failure = CourierError.wrap(error)
            self.log.finished(
                exchange.request, status: failure.status?.code ?? exchange.record.status, duration: .now - exchange.start,
                bytes: failure.body?.count ?? 0, version: exchange.record.version, outcome: "failure(\(failure.shortDescription))"
            )
            throw failure
        }
        outcome.duration = .now - exchange.start
        outcome.urlString = outcome.response.url?.absoluteString ?? exchange.request.urlString
        outcome.request = exchange.request
        if exchange.mode == .download { return outcome }
        guard !exchange.mode.isStream else {
            // The body is still arriving: the line says so (downloads log their own end).
            self.log.finished(exchange.request, status: outcome.response.status.code, duration: .now - exchange.start, bytes: 0, version: outcome.response.version, outcome: "streaming")
            return outcome
        }
        let text: String
        switch outcome.source {
        case .network: text = "success"
        case .coalesced: text = "success(coalesced)"
        case .cache: text = "success(cache, age \(Int(outcome.age ?? 0))s)"
        case .revalidated: text = "success(revalidated)"
        case .stale: text = "success(stale, age \(Int(outcome.age ?? 0))s)"
        }
        self.log.finished(
            exchange.request, status: outcome.response.status.code, duration: outcome.duration, bytes: outcome.body.count,
            version: outcome.source == .cache || outcome.source == .stale ? nil : outcome.response.version, outcome: text
        )
        return outcome
    }
}

/// Stage 1: every error leaving the pipeline gets its presentation from the client's
/// ``ErrorClassifier``, and a business code mapped to an event raises it.
struct ClassifyStage: PipelineStage {
    let classifier: ErrorClassifier
    let onEvent: (@Sendable (CourierEvent) -> Void)?
    var name: String { "classify" }

    func run(_ exchange: RequestExchange, next: @escaping PipelineStageNext) async throws -> Outcome {
        do {
            return try await next(exchange)
        } catch {
            throw self.classified(error)
        }
    }

    func classified(_ error: any Error) -> CourierError {
        var failure = CourierError.wrap(error)
        if Task.isCancelled, failure.kind == .transport {
            let context = failure.context
            failure = .cancelled(underlying: failure)
            failure.context = context
        }
        failure.presentation = self.classifier.classify(failure)
        if let name = failure.event, let onEvent = self.onEvent {
            onEvent(CourierEvent(name: name, error: failure))
        }
        return failure
    }
}
