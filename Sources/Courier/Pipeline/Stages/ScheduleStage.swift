import Foundation
import HTTPTypes

/// The request waits for a slot under the total and per-host limits, highest priority
/// first (FIFO within a priority, with ageing); changes of priority move it while it waits;
/// cancelling or timing out while queued sends nothing and leaves no trace in the queue.
///
/// The slot is held until the body has ended: for collected bodies when they have been read, for
/// streams and downloads when the caller has read the last byte, stopped reading, or dropped the
/// body — so the scheduler never believes a busy connection is free. It follows the exchange
/// from host to host: a redirect to another host gives this host's slot back and waits for one
/// of the other's, and a request sent again from the top after that (a retry, a middleware's)
/// takes its first host's back (``moveSlot(_:to:scheduler:events:spokeHTTP2:)``), unless
/// another attempt of the exchange is still in the redirect stage.
struct ScheduleStage: PipelineStage {
    let scheduler: RequestScheduler
    let events: EventHub
    var name: String { "schedule" }

    @inline(__always)
    func run<Next: PipelineNext>(_ exchange: RequestExchange, next: Next) async throws -> Outcome {
        let scheduler = self.scheduler
        let ticket = exchange.ticket ?? scheduler.makeTicket()
        // A shared request's key has it made already.
        let host = exchange.key?.hostKey ?? LogicalKey.hostKey(of: exchange.request.head)
        // Changes of priority move the request while it waits for its slot, and only then: once
        // it has one, the observer goes (a change after that would wait in the scheduler for a
        // ticket that never comes back).
        let observer = exchange.control.map { control in control.onPriorityChange { scheduler.reprioritize(ticket: ticket, to: $0) } }
        do {
            // A suspended client's scheduler hands out no slot: the request waits in the queue,
            // in its place in line, until `resume()`. (One granted a slot just before goes on,
            // as one already on the wire does.)
            try await self.acquire(exchange, ticket: ticket, host: host)
        } catch {
            if let observer { exchange.control?.removeObserver(observer) }
            throw error
        }
        if let observer { exchange.control?.removeObserver(observer) }
        if let deduplicator = exchange.sharedBy, let key = exchange.key { deduplicator.tookSlot(key: key, ticket: ticket) }
        exchange.record.holdSlot(.init(host: host, ticket: ticket))
        let outcome: Outcome
        do {
            outcome = try await next(exchange)
        } catch {
            self.releaseAfter(exchange)
            throw error
        }
        return self.released(outcome, exchange: exchange)
    }

    /// Frees the slot of an exchange that failed, if it holds one. An error status arrives here
    /// too (an answer the endpoint does not accept): what the last attempt spoke counts, unless a
    /// redirect moved the slot (then the protocol read may be another host's).
    @inline(never)
    private func releaseAfter(_ exchange: RequestExchange) {
        guard let held = exchange.record.slot else { return }
        self.release(exchange, host: held.host, spokeHTTP2: !held.moved && (exchange.record.version.map { $0.major >= 2 } ?? false))
    }

    /// Moves the exchange's slot to `host` when it holds one of another host: gives the old one
    /// back (crediting it with HTTP/2 when `spokeHTTP2`: the answer that sent the exchange away
    /// came from it), then takes one of `host`'s, waiting in the queue in the exchange's place in
    /// line at its priority (a shared request's: the highest among its waiters, whose changes
    /// follow it to the new ticket). A wait that fails (cancelled, timed out) leaves the exchange
    /// holding no slot; an attempt sent after that (a middleware's resend) takes one again here.
    static func moveSlot(
        _ exchange: RequestExchange, to host: String, scheduler: RequestScheduler, events: EventHub, spokeHTTP2: Bool
    ) async throws {
        let record = exchange.record
        let taken: ExchangeRecord.SlotHold
        if let held = record.slot {
            guard held.host != host, let given = record.takeSlot(heldAt: held.host) else { return }
            scheduler.release(host: given.host, spokeHTTP2: spokeHTTP2)
            events.emit(exchange.request) { $0.slotReleased($1, host: given.host) }
            taken = given
        } else {
            // An earlier attempt's wait for a slot failed: this one holds none, and waits for one
            // (nothing to give back; the ticket is what a shared request's waiters knew it by).
            guard let lost = record.takeLostSlot() else { return }
            taken = lost
        }
        let ticket = scheduler.makeTicket()
        var priority = exchange.priorityOverride ?? exchange.priority
        if let deduplicator = exchange.sharedBy, let key = exchange.key,
            let shared = deduplicator.moved(key: key, from: taken.ticket, to: ticket)
        {
            priority = shared
        }
        // Watched before the ticket queues, so a change in between is not lost.
        let observer = exchange.control.map { control in control.onPriorityChange { scheduler.reprioritize(ticket: ticket, to: $0) } }
        defer { if let observer { exchange.control?.removeObserver(observer) } }
        if !scheduler.tryAcquire(ticket: ticket, host: host, priority: exchange.control?.priority ?? priority, order: exchange.order) {
            let started = ContinuousClock.now
            events.emit(exchange.request) { $0.requestQueued($1, host: host) }
            do {
                try await scheduler.waitForSlot(ticket: ticket)
            } catch {
                record.loseSlot(.init(host: host, ticket: ticket, moved: true))
                events.emit(exchange.request) { $0.requestDequeued($1, host: host) }
                throw error
            }
            if events.isActive { record.queued += .now - started }
            events.emit(exchange.request) { $0.requestDequeued($1, host: host) }
        }
        if let deduplicator = exchange.sharedBy, let key = exchange.key { deduplicator.tookSlot(key: key, ticket: ticket) }
        record.holdSlot(.init(host: host, ticket: ticket, moved: true))
        events.emit(exchange.request) { $0.slotAcquired($1, host: host) }
    }

    /// Takes a slot: at once when one is free, else after waiting in the queue (telling the
    /// monitors when they listen).
    @inline(__always)
    private func acquire(_ exchange: RequestExchange, ticket: UInt64, host: String) async throws {
        if self.events.isActive {
            try await self.acquireObserved(exchange, ticket: ticket, host: host)
        } else if !self.scheduler.tryAcquire(
            ticket: ticket, host: host, priority: exchange.priorityOverride ?? exchange.priority, order: exchange.order)
        {
            try await self.scheduler.waitForSlot(ticket: ticket)
        }
    }

    /// Whether a response whose URL is `url` (`nil`: not redirected) came from `host` (a per-host key).
    static func answeredBy(_ host: String, _ url: URL?) -> Bool {
        guard let url else { return true }
        guard let authority = Authority(url) else { return false }
        let port = authority.port.map { ":\($0)" } ?? ""
        let written = authority.host.contains(":") ? "[\(authority.host)]\(port)" : "\(authority.host)\(port)"
        let scheme = authority.scheme
        return Authority.slotKey(hostKey: Authority.hostKey(scheme: scheme, authority: written), scheme: scheme) == host
    }

    /// Frees the slot.
    @inline(never)
    private func release(_ exchange: RequestExchange, host: String, spokeHTTP2: Bool) {
        self.scheduler.release(host: host, spokeHTTP2: spokeHTTP2)
        self.events.emit(exchange.request) { $0.slotReleased($1, host: host) }
    }

    /// The outcome, its slot freed now (a body in memory) or once its streamed body has ended.
    @inline(never)
    private func released(_ outcome: consuming Outcome, exchange: RequestExchange) -> Outcome {
        guard let host = exchange.record.slot?.host else { return outcome }
        // Only an answer from this host itself says it speaks HTTP/2: another host's protocol must
        // not raise this one's limit.
        let spokeHTTP2 = outcome.response.version.major >= 2 && Self.answeredBy(host, outcome.response.url)
        guard exchange.mode.isStream, outcome.response.body.bytes == nil else {
            self.release(exchange, host: host, spokeHTTP2: spokeHTTP2)
            return outcome
        }
        let lease = BodyLease { [self] in self.release(exchange, host: host, spokeHTTP2: spokeHTTP2) }
        outcome.response.body = outcome.response.body.ending(with: lease)
        return outcome
    }

    /// Acquires a slot, telling the monitors when the request waits, leaves the queue and holds the slot.
    private func acquireObserved(_ exchange: RequestExchange, ticket: UInt64, host: String) async throws {
        let events = self.events
        let started = ContinuousClock.now
        let parked = Locked(false)
        do {
            try await self.scheduler.acquire(
                ticket: ticket, host: host, priority: exchange.priorityOverride ?? exchange.priority, order: exchange.order
            ) {
                parked.withLock { $0 = true }
                events.emit(exchange.request) { $0.requestQueued($1, host: host) }
            }
        } catch {
            if parked.current { events.emit(exchange.request) { $0.requestDequeued($1, host: host) } }
            throw error
        }
        if parked.current {
            exchange.record.queued = .now - started
            events.emit(exchange.request) { $0.requestDequeued($1, host: host) }
        }
        events.emit(exchange.request) { $0.slotAcquired($1, host: host) }
    }
}
