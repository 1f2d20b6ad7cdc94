import Foundation
import HTTPTypes

/// A status outside the endpoint's accepted statuses (2xx by default) throws kind
/// `httpStatus`, with the header fields and the body (up to the maximum response size) kept.
/// A `304` answering the cache's own revalidation is not an error.
struct StatusCheckStage: PipelineStage {
    let maxResponseSize: Int
    var name: String { "status-check" }

    @inline(__always)
    func run<Next: PipelineNext>(_ exchange: RequestExchange, next: Next) async throws -> Outcome {
        let outcome = try await next(exchange)
        if Self.accepts(exchange, status: outcome.response.statusCode) { return outcome }
        try await self.fail(outcome.response, deadline: exchange.request.deadline)
    }

    /// Whether the status is one the endpoint accepts, or the 304 the cache's revalidation asked for.
    @inline(never)
    static func accepts(_ exchange: RequestExchange, status: Int) -> Bool {
        exchange.endpoint.acceptedStatuses.contains(status) || exchange.answersRevalidation(status: status)
    }

    /// Throws kind `httpStatus` for the response, its body read up to the maximum response size.
    /// Apart from `run` so that the async frame of every request does not hold this path's values.
    @inline(never)
    private func fail(_ response: RawResponse, deadline: ContinuousClock.Instant?) async throws -> Never {
        var body = response.body.bytes
        if body == nil {
            body = try? await response.body.collect(upTo: self.maxResponseSize, deadline: deadline)
        }
        throw CourierError.httpStatus(response.head, body: body)
    }
}
