import Foundation
import HTTPTypes

/// While the client is constrained (Low Data Mode), a prefetch endpoint is refused with
/// kind `constrained` or waits until it is lifted, by the client's ``ConstrainedPolicy`` — for
/// every kind of exchange, downloads and streams included. The wait ends with the caller's
/// cancellation or deadline.
struct ConstrainedStage: PipelineStage {
    let gate: ConstrainedGate
    let policy: ConstrainedPolicy
    var name: String { "constrained" }

    @inline(__always)
    func run<Next: PipelineNext>(_ exchange: RequestExchange, next: Next) async throws -> Outcome {
        if exchange.endpoint.isPrefetch {
            try await self.gate.admit(policy: self.policy, lifecycleTicket: exchange.lifecycleTicket)
        }
        return try await next(exchange)
    }
}
