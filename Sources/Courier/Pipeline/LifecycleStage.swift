import Foundation

/// Stage 4: each caller's request holds a ticket of the client's ``Lifecycle`` while it runs,
/// so ``Client/cancelAll(reason:)`` reaches it wherever it is (queued, held, in flight), and a
/// request cancelled that way fails with kind `cancelled` and the reason given. After
/// ``Client/shutdown(gracePeriod:)`` new requests fail here at once.
struct LifecycleStage: PipelineStage {
    let lifecycle: Lifecycle
    var name: String { "lifecycle" }

    func run(_ exchange: RequestExchange, next: @escaping PipelineStageNext) async throws -> Outcome {
        let ticket = try self.lifecycle.begin()
        var exchange = exchange
        exchange.lifecycleTicket = ticket
        do {
            let outcome = try await next(exchange)
            self.lifecycle.end(ticket)
            return outcome
        } catch {
            if let reason = self.lifecycle.end(ticket) {
                var failure = CourierError(.cancelled, reason)
                failure.underlying = error
                throw failure
            }
            throw error
        }
    }
}
