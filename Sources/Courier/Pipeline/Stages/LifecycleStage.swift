import Foundation

/// Each caller's request holds a ticket of the client's ``Lifecycle`` while it runs,
/// so ``Client/cancelAll(reason:)`` reaches it wherever it is (queued, held, in flight), and a
/// request cancelled that way fails with kind `cancelled` and the reason given. After
/// ``Client/shutdown(gracePeriod:)`` new requests fail here at once.
struct LifecycleStage: PipelineStage {
    let lifecycle: Lifecycle
    var name: String { "lifecycle" }

    @inline(__always)
    func run<Next: PipelineNext>(_ exchange: RequestExchange, next: Next) async throws -> Outcome {
        let ticket: UInt64
        if let started = exchange.control?.lifecycleTicket, case let state = self.lifecycle.state(of: started), state != .ended {
            // Taken when the request was started; `cancelAll` may have cancelled it since.
            if case .cancelled(let reason) = state {
                self.lifecycle.end(started)
                throw CourierError(.cancelled, reason)
            }
            ticket = started
        } else {
            // (A download's later rounds find its ticket ended by the first round, as a new
            // request of its own would: each takes one.)
            ticket = try self.lifecycle.begin()
        }
        var exchange = exchange
        exchange.lifecycleTicket = ticket
        let outcome: Outcome
        do {
            outcome = try await next(exchange)
        } catch {
            throw self.ended(ticket, error)
        }
        // Cancelled after its work was done (while it was decoded, say): `cancelAll` counted it,
        // so it fails as the others do, and the app never sees an answer it cancelled.
        if let reason = self.lifecycle.end(ticket) { throw Self.cancelled(outcome, reason: reason) }
        return outcome
    }

    /// The error of a request cancelled after its answer came: it keeps the answer's status and
    /// fields (an outbox then knows the server took its request).
    @inline(never)
    private static func cancelled(_ outcome: Outcome, reason: String) -> CourierError {
        outcome.response.body.cancel()
        var error = CourierError(.cancelled, reason)
        // (A stored answer is not the server's: nothing to keep.)
        guard outcome.source != .cache, outcome.source != .stale else { return error }
        error.status = outcome.response.head.status
        error.headers = outcome.response.head.headerFields
        error.bodyLostAfterHead = true
        return error
    }

    /// The error the request fails with once its ticket has ended: `cancelled` with the reason
    /// when `cancelAll` ended it, else `error` itself.
    @inline(never)
    private func ended(_ ticket: UInt64, _ error: any Error) -> any Error {
        guard let reason = self.lifecycle.end(ticket) else { return error }
        var failure = CourierError(.cancelled, reason)
        failure.underlying = error
        failure.keepAnswer(of: error)
        return failure
    }
}
