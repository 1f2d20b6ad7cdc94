import Foundation
import HTTPTypes

/// The client's middleware in order, then the endpoint's — authentication,
/// prerequisites, signing, your own. They run after queueing, just before the request leaves, so
/// a token or a signature is never stale, and they see the request as boxed for the wire (the
/// bytes that are sent). Responses come back through them in reverse order.
///
/// An error a middleware throws surfaces as itself: a ``CourierError`` keeps its kind; any other
/// error becomes kind `middleware` with the error as ``CourierError/underlying``; either way its
/// ``ErrorContext/stage`` names the middleware's type.
struct MiddlewareStage: PipelineStage {
    enum Scope: String, Sendable {
        case client
        case endpoint
    }

    let scope: Scope
    let clientMiddleware: [any Middleware]
    let events: EventHub
    var name: String { "\(self.scope.rawValue)-middleware" }
    var isLinked: Bool { self.scope == .endpoint || !self.clientMiddleware.isEmpty }

    @inline(__always)
    func run<Next: PipelineNext>(_ exchange: RequestExchange, next: Next) async throws -> Outcome {
        if self.chainIsEmpty(exchange) { return try await next(exchange) }
        return try await self.intercepted(exchange, next: next)
    }

    @inline(never)
    private func chainIsEmpty(_ exchange: RequestExchange) -> Bool {
        self.scope == .client ? self.clientMiddleware.isEmpty : exchange.endpoint.middleware.isEmpty
    }

    /// The exchange sent through the middleware of this stage's scope.
    @inline(never)
    private func intercepted<Next: PipelineNext>(_ exchange: RequestExchange, next: Next) async throws -> Outcome {
        let chain = self.scope == .client ? self.clientMiddleware : exchange.endpoint.middleware
        let last = Self.last(exchange, next: next)
        guard self.events.isActive else {
            return Outcome(response: try await MiddlewareChain.send(exchange.request, through: chain, exchange: exchange, last: last))
        }
        return try await self.interceptedObserved(exchange, chain: chain, last: last)
    }

    /// What the last middleware calls: the rest of the pipeline (made apart, so the exchange
    /// it captures is not also held by the async frame).
    @inline(never)
    private static func last<Next: PipelineNext>(_ exchange: RequestExchange, next: Next) -> Middleware.Next {
        { request in
            var inner = exchange
            inner.request = request
            return try await next.outOfLine(inner).response
        }
    }

    /// ``intercepted(_:next:)`` with a monitor listening: middleware (an authenticator) reports
    /// its own events through the task-local scope.
    @inline(never)
    private func interceptedObserved(
        _ exchange: RequestExchange, chain: [any Middleware], last: @escaping Middleware.Next
    ) async throws -> Outcome {
        let scope = MonitorScope(events: self.events, request: exchange.request)
        return Outcome(
            response: try await MonitorScope.$current.withValue(scope) {
                try await MiddlewareChain.send(exchange.request, through: chain, exchange: exchange, last: last)
            })
    }
}
