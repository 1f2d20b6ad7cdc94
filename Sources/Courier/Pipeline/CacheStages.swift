import Foundation
import HTTPTypes

/// Stage 7: the cache is consulted under the exchange's ``CachePolicy``, with the *logical*
/// request (before wire boxing and middleware). A fresh stored response answers here (source
/// `.cache`, with its age and an `Age`-free copy of its stored header fields); a stale one that
/// has a validator gets `If-None-Match` / `If-Modified-Since` added for the network.
///
/// Streamed exchanges bypass the cache: their bodies are never held in memory. No cache store
/// configured: nothing happens.
struct CacheLookupStage: PipelineStage {
    let cache: ResponseCache?
    var name: String { "cache-lookup" }

    func run(_ exchange: RequestExchange, next: @escaping PipelineStageNext) async throws -> Outcome {
        guard let cache = self.cache, !exchange.mode.isStream else { return try await next(exchange) }
        var exchange = exchange
        let run = cache.begin(exchange.request, policy: exchange.cachePolicy, partition: exchange.partition, wire: exchange.wireIdentity)
        // A stored status this endpoint does not accept (another endpoint's 404) is not an answer.
        if let hit = cache.served(run), exchange.endpoint.acceptedStatuses.contains(hit.response.status.code) {
            return hit
        }
        if case .revalidate(let conditions) = run.action {
            exchange.request.head.headerFields.append(contentsOf: conditions)
        }
        if cache.mayStore(run) { exchange.readsBody = true }
        exchange.cacheRun = run
        return try await next(exchange)
    }
}

/// Stage 9: on the way up, what passed the status check and the unboxing is stored (a business
/// error under HTTP 200 or a JSON-RPC error object never is); a `304` answering a revalidation
/// refreshes the stored entry and serves it (source `.revalidated`); a successful unsafe method
/// invalidates the URL's entries.
///
/// It sits below deduplication, so a shared exchange is stored once. What is stored is the
/// payload after unboxing, so a hit needs no wire protocol.
///
/// **Vary and middleware.** The lookup runs on the logical request, before middleware adds
/// `Authorization`, `Cookie`, signatures or anything else. A response whose `Vary` names a field
/// whose value in the request as sent differs from the logical request's (a field set or changed
/// below the cache) is not stored: a later lookup could not tell those values apart, and one
/// user would be served another's response. Put per-user header fields in the endpoint (so they
/// are part of the logical request) or give each account its own cache partition.
struct CacheStoreStage: PipelineStage {
    let cache: ResponseCache?
    var name: String { "cache-store" }

    func run(_ exchange: RequestExchange, next: @escaping PipelineStageNext) async throws -> Outcome {
        guard let cache = self.cache, let run = exchange.cacheRun else { return try await next(exchange) }
        let outcome = try await next(exchange)
        return cache.finish(run, outcome: outcome, sentHeaders: exchange.record.sentHeaders)
    }
}

/// Stage 8: an identical logical request already in flight is joined instead of sent again; the
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
    var name: String { "deduplication" }

    func run(_ exchange: RequestExchange, next: @escaping PipelineStageNext) async throws -> Outcome {
        guard self.configuration.isEnabled, let key = exchange.key, Self.shares(exchange) else {
            return try await next(exchange)
        }
        var sharing = exchange
        // Waiters enforce their own deadlines; the shared exchange lives while anyone waits, at
        // the highest priority among them (the deduplicator owns it, not the first caller).
        sharing.request.deadline = nil
        sharing.control = nil
        sharing.readsBody = true
        let deduplicator = self.deduplicator
        sharing.waitersDeadline = { deduplicator.latestDeadline(key: key) }
        let shared = sharing
        let outcome: Outcome
        let coalesced: Bool
        do {
            (outcome, coalesced) = try await self.deduplicator.run(
                key: key, priority: exchange.priority, deadline: exchange.request.deadline, control: exchange.control
            ) { ticket, priority in
                var run = shared
                run.ticket = ticket
                run.priorityOverride = priority
                return try await next(run)
            }
        } catch {
            // A joiner's error names the joiner's own request, not the one that went on the wire.
            throw ErrorContext.rebase(error, onto: exchange)
        }
        guard coalesced else { return outcome }
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

/// Stage 10: the request waits for a slot under the total and per-host limits, highest priority
/// first (FIFO within a priority, with ageing); changes of priority move it while it waits;
/// cancelling or timing out while queued sends nothing and leaves no trace in the queue.
///
/// The slot is held until the body has ended: for collected bodies when they have been read, for
/// streams and downloads when the caller has read the last byte, stopped reading, or dropped the
/// body — so the scheduler never believes a busy connection is free.
struct ScheduleStage: PipelineStage {
    let scheduler: RequestScheduler
    var name: String { "schedule" }

    func run(_ exchange: RequestExchange, next: @escaping PipelineStageNext) async throws -> Outcome {
        let scheduler = self.scheduler
        let ticket = exchange.ticket ?? scheduler.makeTicket()
        let host = exchange.request.head.authority ?? ""
        if let control = exchange.control {
            control.onPriorityChange { scheduler.reprioritize(ticket: ticket, to: $0) }
        }
        try await scheduler.acquire(ticket: ticket, host: host, priority: exchange.priorityOverride ?? exchange.priority)
        var outcome: Outcome
        do {
            outcome = try await next(exchange)
        } catch {
            scheduler.release(host: host, spokeHTTP2: exchange.record.version.map { $0.major >= 2 } ?? false)
            throw error
        }
        let spokeHTTP2 = outcome.response.version.major >= 2
        guard exchange.mode.isStream, outcome.response.body.bytes == nil else {
            scheduler.release(host: host, spokeHTTP2: spokeHTTP2)
            return outcome
        }
        let lease = BodyLease { scheduler.release(host: host, spokeHTTP2: spokeHTTP2) }
        outcome.response.body = outcome.response.body.ending(with: lease)
        return outcome
    }
}
