import Foundation
import HTTPTypes

/// An identical logical request already in flight is joined instead of sent again; the
/// shared response's bytes go to every waiter, which each decode them on their own.
///
/// On for GET and HEAD; other methods opt in with ``Deduplication/key(_:)``. The identity is the
/// ``LogicalKey`` — taken before wire boxing (two JSON-RPC calls with different wire ids match)
/// and including the cache partition and the endpoint's middleware. Each waiter keeps its own
/// deadline (the deadline stage above), cancellation and priority: one waiter cancelling or
/// timing out leaves the others waiting; the wire request is cancelled only when the last has
/// gone, and runs at the highest priority among its waiters. Streamed exchanges are never shared.
struct DeduplicationStage: PipelineStage {
    let deduplicator: Deduplicator
    let configuration: DeduplicationConfiguration
    let events: EventHub
    let lifecycle: Lifecycle
    var name: String { "deduplication" }
    var isLinked: Bool { self.configuration.isEnabled }

    static var mayBypass: Bool { true }
    func bypasses(_ exchange: RequestExchange) -> Bool { !self.isShared(exchange) }

    @inline(__always)
    func run<Next: PipelineNext>(_ exchange: RequestExchange, next: Next) async throws -> Outcome {
        if self.isShared(exchange) { return try await self.share(exchange, next: next) }
        return try await next(exchange)
    }

    /// Whether the exchange is one deduplication shares: the build stage gives a key only to
    /// an exchange that ``shares(_:)`` (collected, deduplication on).
    @inline(never)
    private func isShared(_ exchange: RequestExchange) -> Bool {
        self.configuration.isEnabled && exchange.key != nil
    }

    /// The exchange sent once for every identical one in flight, or joined to the one that is.
    @inline(never)
    private func share<Next: PipelineNext>(_ exchange: RequestExchange, next: Next) async throws -> Outcome {
        guard let key = exchange.key else { return try await next(exchange) }
        // The closures are made in synchronous helpers: the exchange copies they capture never
        // sit in this async frame.
        let result: (Outcome, coalesced: Bool)
        let ticket = self.deduplicator.makeSharedTicket()
        do {
            result = try await self.deduplicator.run(
                key: key, ticket: ticket, priority: exchange.priorityOverride ?? exchange.priority, deadline: exchange.request.deadline,
                control: exchange.control,
                requestID: exchange.request.id, lifecycle: self.lifecycle, lifecycleTicket: exchange.lifecycleTicket,
                onJoin: self.onJoin(exchange),
                fetch: self.fetch(exchange, ticket: ticket, next: next)
            )
        } catch {
            // A joiner's error names the joiner's own request, not the one that went on the wire.
            throw ErrorContext.rebase(error, onto: exchange)
        }
        return result.coalesced ? Self.coalesced(result.0) : result.0
    }

    /// The shared request: the exchange without this caller's deadline and priority control.
    /// Waiters enforce their own deadlines; the shared exchange lives while anyone waits, at the
    /// highest priority among them (the deduplicator owns it, not the first caller).
    @inline(never)
    private func fetch<Next: PipelineNext>(_ exchange: RequestExchange, ticket: UInt64, next: Next) -> Deduplicator.Fetch {
        // Made by a function that returns it, so the closure takes the one copy over (a copy
        // made here and then captured was copied once more: a dozen retains a request).
        let shared = Self.shared(exchange, ticket: ticket, by: self.deduplicator)
        return { ticket, priority in
            // Usually it starts as made: passed on as it is, without a copy.
            if ticket == shared.ticket, priority == shared.priorityOverride { return try await next(shared) }
            var run = shared
            run.ticket = ticket
            run.priorityOverride = priority
            return try await next(run)
        }
    }

    /// The exchange that goes on the wire for everyone who shares it.
    private static func shared(_ exchange: RequestExchange, ticket: UInt64, by deduplicator: Deduplicator) -> RequestExchange {
        var sharing = exchange
        sharing.request.deadline = nil
        sharing.control = nil
        sharing.readsBody = true
        sharing.ticket = ticket
        // A background revalidation's `.low` stays: nobody waits for it.
        sharing.priorityOverride = exchange.priorityOverride ?? exchange.priority
        sharing.sharedBy = deduplicator
        return sharing
    }

    /// Tells the monitors this caller joined a request in flight (`nil`: no monitor listens).
    @inline(never)
    private func onJoin(_ exchange: RequestExchange) -> (@Sendable (RequestID) -> Void)? {
        guard self.events.isActive else { return nil }
        let events = self.events
        let joiner = exchange.request
        return { leader in events.emit(joiner) { monitor, event in monitor.deduplicationJoined(event, sharing: leader) } }
    }

    /// A joiner's outcome: its source says it was coalesced.
    @inline(never)
    private static func coalesced(_ outcome: Outcome) -> Outcome {
        var joined = outcome
        joined.source = outcome.source == .network ? .coalesced : outcome.source
        return joined
    }

    static func shares(_ exchange: RequestExchange) -> Bool {
        switch exchange.endpoint.deduplication.mode {
        case .disabled: return false
        case .key: return true
        case .automatic: return exchange.request.head.method == .get || exchange.request.head.method == .head
        }
    }
}
