import Foundation

/// Every error leaving the pipeline gets its presentation from the client's
/// ``ErrorClassifier``, and a business code mapped to an event raises it.
struct ClassifyStage: PipelineStage {
    let classifier: ErrorClassifier
    let onEvent: (@Sendable (CourierEvent) -> Void)?
    var name: String { "classify" }

    @inline(__always)
    func run<Next: PipelineNext>(_ exchange: RequestExchange, next: Next) async throws -> Outcome {
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
            let original = failure
            failure = .cancelled(underlying: failure)
            failure.context = context
            failure.keepAnswer(of: original)
        }
        failure.presentation = self.classifier.classify(failure)
        if let name = failure.event, let onEvent = self.onEvent {
            onEvent(CourierEvent(name: name, error: failure))
        }
        return failure
    }
}
