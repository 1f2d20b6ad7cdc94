import Foundation

/// Where in the pipeline an error happened: which request, which attempt, which stage.
///
/// Every ``CourierError`` that leaves a ``Client`` carries one (``CourierError/context``).
public struct ErrorContext: Sendable, Hashable, CustomStringConvertible {
    /// The endpoint's name.
    public var endpoint: String
    /// The request's identifier, as in its log lines.
    public var requestID: RequestID
    /// The request's URL, with secrets redacted.
    public var url: String
    /// The attempt that failed (1 for the first; retries count up).
    public var attempt: Int
    /// The stage that failed (`build`, `schedule`, `wire`, `status-check`, `transport`, …), or for
    /// an error of a middleware, the middleware's type name.
    public var stage: String

    /// Creates a context.
    public init(endpoint: String, requestID: RequestID, url: String, attempt: Int, stage: String) {
        self.endpoint = endpoint
        self.requestID = requestID
        self.url = url
        self.attempt = attempt
        self.stage = stage
    }

    /// `endpoint news.article, request 1a2b3c4d, attempt 1, stage transport, url https://…`.
    public var description: String {
        "endpoint \(self.endpoint), request \(self.requestID), attempt \(self.attempt), stage \(self.stage), url \(self.url)"
    }

    /// The error as a ``CourierError`` with a context: an existing context is kept (the innermost
    /// stage that failed wins); a middleware's own error that is not a `CourierError` becomes
    /// kind `middleware`.
    static func attach(_ error: any Error, stage: String, exchange: RequestExchange, fromMiddleware: Bool = false) -> CourierError {
        var failure: CourierError
        if let courier = error as? CourierError {
            failure = courier
        } else if fromMiddleware, !(error is CancellationError) {
            failure = CourierError(.middleware, "\(stage) failed: \(error)", underlying: error)
        } else {
            failure = CourierError.wrap(error)
        }
        // Keep the context of this request's innermost failing stage; an error that carries
        // another request's context (a nested client's, as a prerequisite fetch or a token
        // refresh has) is re-attributed to this request and this stage.
        if let context = failure.context {
            if context.requestID == exchange.request.id { return failure }
            // Another request's connection failure is not this request's: the retry stage must
            // not read it as one (nor as a request the server did not process).
            failure.isFromTransport = false
            failure.wasNotProcessed = false
            failure.couldNotConnect = false
            // Nor is its answer this request's.
            failure.bodyLostAfterHead = false
        }
        let request = exchange.request
        failure.context = ErrorContext(
            endpoint: exchange.endpoint.name, requestID: request.id,
            url: request.url.map(Redactor.standard.redact(url:)) ?? (request.head.path ?? "/"),
            attempt: exchange.record.attempt, stage: stage
        )
        return failure
    }

    /// The error with its context moved onto `exchange`'s request (endpoint, id, URL), keeping
    /// the stage and attempt: for a deduplicated joiner, which failed with a shared exchange.
    static func rebase(_ error: any Error, onto exchange: RequestExchange) -> CourierError {
        var failure = CourierError.wrap(error)
        guard var context = failure.context, context.requestID != exchange.request.id else { return failure }
        context.endpoint = exchange.endpoint.name
        context.requestID = exchange.request.id
        context.url = exchange.request.url.map(Redactor.standard.redact(url:)) ?? (exchange.request.head.path ?? "/")
        failure.context = context
        return failure
    }
}
