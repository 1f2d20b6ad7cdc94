import Foundation
import HTTPTypes

/// A failed attempt is sent again under the endpoint's ``RetryPolicy`` (or the
/// client's): the decision is ``RetryPolicy/decide(_:)``, a pure function; a ``RetryBudget``
/// keeps retries to a share of requests. The backoff wait is cancellable and never passes the
/// deadline. Each retry is logged with its attempt number, and per-hop middleware (signing)
/// runs again for it.
struct RetryStage: PipelineStage {
    let defaultPolicy: RetryPolicy
    let budget: RetryBudget
    let events: EventHub
    let clientMiddleware: [any Middleware]
    var name: String { "retry" }

    @inline(__always)
    func run<Next: PipelineNext>(_ exchange: RequestExchange, next: Next) async throws -> Outcome {
        // An exchange arrives as attempt 1 (only this stage numbers attempts, on its own copies);
        // then the first attempt needs no copy of it, and its frame stays small.
        guard exchange.request.attempt == 1 else { return try await self.renumbered(exchange, next: next) }
        self.budget.recordRequest()
        exchange.record.setAttempt(1)
        let outcome: Outcome
        do {
            outcome = try await next(exchange)
        } catch {
            return try await self.retrying(exchange, afterError: error, next: next)
        }
        if self.mayRetry(exchange, status: outcome.response.statusCode) {
            return try await self.retrying(exchange, afterResponse: outcome, next: next)
        }
        return outcome
    }

    /// ``retrying(_:after:next:)`` after a first attempt that failed.
    @inline(never)
    private func retrying<Next: PipelineNext>(_ exchange: RequestExchange, afterError error: any Error, next: Next) async throws -> Outcome
    {
        try await self.retrying(exchange, after: .failure(error), next: next)
    }

    /// ``retrying(_:after:next:)`` after a first attempt answered with a status the policy retries.
    @inline(never)
    private func retrying<Next: PipelineNext>(
        _ exchange: RequestExchange, afterResponse outcome: Outcome, next: Next
    ) async throws -> Outcome {
        try await self.retrying(exchange, after: .success(outcome), next: next)
    }

    /// The exchange as attempt 1, through `run`.
    @inline(never)
    private func renumbered<Next: PipelineNext>(_ exchange: RequestExchange, next: Next) async throws -> Outcome {
        var first = exchange
        first.request.attempt = 1
        return try await self.run(first, next: next)
    }

    /// Whether the policy may send the request again after a response with `status`.
    @inline(never)
    private func mayRetry(_ exchange: RequestExchange, status: Int) -> Bool {
        let policy = exchange.endpoint.retryPolicy ?? self.defaultPolicy
        return policy.maxAttempts > 1 && policy.retryableStatuses.contains(status)
    }

    /// The attempts after the first, while the policy and the budget allow. Apart from `run` so
    /// that the first attempt's async frame stays small (the common case never retries).
    @inline(never)
    private func retrying<Next: PipelineNext>(
        _ exchange: RequestExchange, after first: Result<Outcome, any Error>, next: Next
    ) async throws -> Outcome {
        let policy = exchange.endpoint.retryPolicy ?? self.defaultPolicy
        guard policy.maxAttempts > 1, !Task.isCancelled else { return try first.get() }
        var current = exchange
        var number = 1
        var result = first
        while true {
            let facts = RetryPolicy.Attempt(
                number: number, method: current.request.head.method,
                hasIdempotencyKey: current.request.head.headerFields[Self.idempotencyKey] != nil,
                bodyCanBeResent: current.request.body.map { $0.isReplayable || !$0.hasBeenSent } ?? true,
                result: Self.classify(result), timeLeft: current.timeLeft, now: Date(), jitter: Double.random(in: 0..<1)
            )
            guard case .retry(let delay) = policy.decide(facts), self.budget.tryRetry() else { return try result.get() }
            if case .success(let outcome) = result {
                await outcome.response.body.discard()
            }
            if self.events.isActive {
                let reason = Self.reason(result)
                self.events.emit(current.request) { $0.retrying($1, attempt: number + 1, after: delay, reason: reason) }
            }
            do {
                try await Task.sleep(for: delay)
            } catch {
                throw CourierError.cancelled(underlying: error)
            }
            number += 1
            current.request.attempt = number
            exchange.record.setAttempt(number)
            do {
                let response = try await MiddlewareChain.sendAgain(current, clientMiddleware: self.clientMiddleware, next: next)
                result = .success(Outcome(response: response))
            } catch {
                result = .failure(error)
            }
            guard policy.maxAttempts > number, !Task.isCancelled else { return try result.get() }
            if case .success(let outcome) = result, !policy.retryableStatuses.contains(outcome.response.statusCode) {
                return outcome
            }
        }
    }

    static let idempotencyKey = HTTPField.Name("Idempotency-Key")!

    static func classify(_ result: Result<Outcome, any Error>) -> RetryPolicy.AttemptResult {
        switch result {
        case .success(let outcome):
            return .status(outcome.response.statusCode, retryAfter: outcome.response.head.headerFields[.retryAfter])
        case .failure(let error):
            guard let failure = error as? CourierError, failure.kind == .transport, failure.isFromTransport, !failure.transportIsShutDown
            else {
                return .other
            }
            return failure.wasNotProcessed ? .notProcessed : .connectionFailed
        }
    }

    static func reason(_ result: Result<Outcome, any Error>) -> String {
        switch result {
        case .success(let outcome): return "status \(outcome.response.statusCode)"
        case .failure(let error): return CourierError.wrap(error).shortDescription
        }
    }
}
