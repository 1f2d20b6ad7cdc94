import Foundation

/// Every error leaving the pipeline gets its presentation from the client's
/// ``ErrorClassifier``, and a business code mapped to an event raises it. An error that has no
/// redactor yet (one made above the observe stage, before the request existed) gets the
/// client's, so its text hides what the app made secret.
struct ClassifyStage: PipelineStage {
    let classifier: ErrorClassifier
    let onEvent: (@Sendable (CourierEvent) -> Void)?
    /// The client's redactor when it is not the standard one (which an error uses without one).
    let ownRedactor: Redactor?
    var name: String { "classify" }

    init(classifier: ErrorClassifier, onEvent: (@Sendable (CourierEvent) -> Void)?, redactor: Redactor) {
        self.classifier = classifier
        self.onEvent = onEvent
        self.ownRedactor = redactor.isStandard ? nil : redactor
    }

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
        if failure.redactor == nil, let redactor = self.ownRedactor { failure.redactor = redactor }
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
