import Foundation
import HTTPTypes

/// The body is read into memory, up to the client's maximum response size
/// (`responseTooLarge`, reading stops there). A body nobody needs (an accepted status, a decoding
/// that ignores the body, no cache, no wire protocol, no other waiter) is discarded instead.
/// Streamed exchanges hand the body to the caller unread.
struct CollectBodyStage: PipelineStage {
    let maxResponseSize: Int
    var name: String { "body" }

    @inline(__always)
    func run<Next: PipelineNext>(_ exchange: RequestExchange, next: Next) async throws -> Outcome {
        var outcome = try await next(exchange)
        guard !exchange.mode.isStream, outcome.response.body.bytes == nil else { return outcome }
        if !exchange.readsBody, exchange.endpoint.acceptedStatuses.contains(outcome.response.statusCode) {
            await outcome.response.body.discard()
            outcome.response.body = .empty
            outcome.bodyDiscarded = true
        } else {
            do {
                outcome.response.body = .data(
                    try await outcome.response.body.collect(upTo: self.maxResponseSize, deadline: exchange.request.deadline))
            } catch let error as CourierError
                where (error.kind == .responseTooLarge || error.kind == .decoding)
                && !StatusCheckStage.accepts(exchange, status: outcome.response.statusCode)
            {
                // A status the endpoint does not accept is the answer, whatever its body's size
                // (an error page past the limit) or coding (a page labelled gzip that is not):
                // kind `httpStatus`, without the body.
                throw CourierError.httpStatus(outcome.response.head, body: nil)
            } catch {
                throw Self.withHead(error, of: outcome.response)
            }
        }
        return outcome
    }

    /// The error a body failed with (too large, cut short, undecodable), carrying the status and
    /// header fields of the response it belonged to: a caller can tell a request the server
    /// answered (a 2xx whose body was lost) from one it may never have received.
    @inline(never)
    static func withHead(_ error: any Error, of response: RawResponse) -> any Error {
        guard var failure = error as? CourierError, failure.status == nil else { return error }
        failure.status = response.head.status
        failure.headers = response.head.headerFields
        failure.bodyLostAfterHead = true
        return failure
    }
}
