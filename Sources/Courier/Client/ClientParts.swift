import Foundation
import HTTPTypes

/// The parts of a client the stages are built from.
struct ClientParts: Sendable {
    let configuration: Client.Configuration
    /// The client's event monitors, its log monitor among them.
    let events: EventHub
    /// Whether requests carry their logical request down to the transport (``Request/logical``).
    let keepsLogicalRequests: Bool
    /// Running requests, suspension and shutdown.
    let lifecycle: Lifecycle
    let base: BaseURL?
    let scheduler: RequestScheduler
    let deduplicator: Deduplicator
    let constrained: ConstrainedGate
    let cache: ResponseCache?
    let decodedValues: DecodedValues
    let retryBudget: RetryBudget
    let callIDs: Locked<Int>
}
