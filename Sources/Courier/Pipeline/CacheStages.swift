import Foundation
import HTTPTypes

/// Stage 7: the cache is consulted under the exchange's ``CachePolicy``, with the *logical*
/// request (before wire boxing and middleware). A fresh stored response answers here (source
/// `.cache`, with an `Age` field giving its current age); a stale one that has a validator gets
/// `If-None-Match` / `If-Modified-Since` added for the network.
///
/// Stale responses (RFC 5861): within a `stale-while-revalidate` window the stored response
/// answers at once (source `.stale`) and one background request revalidates it: however many
/// callers ask meanwhile, one reaches the origin (and it goes through deduplication, joining an
/// identical request already in flight).
/// Within a `stale-if-error` window a stored response answers when the origin answers 500, 502,
/// 503 or 504, or cannot be reached (a transport error or a timeout of the transport's own).
/// A request with `Cache-Control: only-if-cached` never reaches the network: without a usable
/// stored response it fails with kind `httpStatus`, status 504 (or, for an endpoint that accepts
/// 504, gets an empty `504` response with source `.cache`) (RFC 9111 §5.2.1.7).
///
/// Streamed exchanges bypass the cache: their bodies are never held in memory. No cache store
/// configured: nothing happens.
struct CacheLookupStage: PipelineStage {
    let cache: ResponseCache?
    let events: EventHub
    var name: String { "cache-lookup" }
    var isLinked: Bool { self.cache != nil }

    static var mayBypass: Bool { true }
    func bypasses(_ exchange: RequestExchange) -> Bool {
        self.cache == nil || (exchange.mode.isStream && CacheRules.isSafe(exchange.request.head.method))
    }

    @inline(__always)
    func run<Next: PipelineNext>(_ exchange: RequestExchange, next: Next) async throws -> Outcome {
        guard let cache = self.cache else { return try await next(exchange) }
        if exchange.mode.isStream { return try await Self.streamed(exchange, cache: cache, next: next) }
        guard self.events.isActive else { return try await self.lookUp(exchange, cache: cache, next: next) }
        return try await self.lookUpObserved(exchange, cache: cache, next: next)
    }

    /// A streamed exchange (``Client/stream(_:)``, a download) is neither answered from nor
    /// stored in the cache, but an unsafe method's answer still invalidates (RFC 9111 §4.4).
    @inline(never)
    private static func streamed<Next: PipelineNext>(_ exchange: RequestExchange, cache: ResponseCache, next: Next) async throws -> Outcome
    {
        let outcome = try await next(exchange)
        cache.invalidateAfter(exchange.request, answer: outcome.response.head, policy: exchange.cachePolicy)
        return outcome
    }

    /// ``lookUp(_:cache:next:)``, telling the monitors what the cache answered.
    @inline(never)
    private func lookUpObserved<Next: PipelineNext>(_ exchange: RequestExchange, cache: ResponseCache, next: Next) async throws -> Outcome {
        let outcome = try await self.lookUp(exchange, cache: cache, next: next)
        switch outcome.source {
        case .cache, .stale:
            self.events.emit(exchange.request) { $0.cacheHit($1, source: outcome.source, age: outcome.age ?? 0) }
        case .revalidated:
            self.events.emit(exchange.request) { $0.cacheRevalidated($1) }
        case .network, .coalesced:
            break
        }
        return outcome
    }

    /// The exchange answered by the cache, or sent to the network with the cache's decision
    /// (validators, the missing range) and the network's answer handled by the cache.
    ///
    /// The decisions before and after the network are synchronous helpers, and the rare ways
    /// on (stale-if-error, asking again as the caller did) functions of their own: the async
    /// frame every cached request allocates from its task stays small.
    @inline(never)
    private func lookUp<Next: PipelineNext>(_ exchange: RequestExchange, cache: ResponseCache, next: Next) async throws -> Outcome {
        let network: CacheNetworkRequest
        switch try Self.decide(exchange, cache: cache, next: next) {
        case .answered(let outcome): return outcome
        case .network(let request): network = request
        }
        let outcome: Outcome
        do {
            outcome = try await next(network.exchange)
        } catch {
            return try await Self.recover(from: error, network, cache: cache, next: next)
        }
        if outcome.source == .network, outcome.response.statusCode == 304, case .revalidate? = network.exchange.cacheRun?.action {
            // A 304 the cache did not take (its validator is not the stored response's): the
            // caller asked for the resource, not for a 304.
            return try await Self.askUnconditionally(network, cache: cache, next: next)
        }
        if let answer = Self.answer(afterNetwork: outcome, network, cache: cache) { return answer }
        // The origin sent a part that does not complete the stored one: ask as the caller did.
        return try await Self.askAsAsked(network, cache: cache, next: next)
    }

    /// What the cache does before the network: answer (a usable stored response, or the 504 of
    /// `only-if-cached`), or send the exchange with its decision.
    @inline(never)
    private static func decide<Next: PipelineNext>(_ asked: RequestExchange, cache: ResponseCache, next: Next) throws -> CacheDecision {
        var exchange = asked
        var planned = cache.begin(
            exchange.request, policy: exchange.cachePolicy, partition: exchange.partition, wire: exchange.wireIdentity)
        let accepted = exchange.endpoint.acceptedStatuses
        // Completing a partial entry brings a 206, which the endpoint must accept.
        if case .resume = planned.action, !accepted.contains(206) { planned.action = .fetch }
        let run = planned
        // A stored status this endpoint does not accept (another endpoint's 404) is not an answer.
        if let hit = cache.served(run), accepted.contains(hit.response.statusCode) {
            if case .serveStale(_, let conditions) = run.action, let entryKey = run.entryKey, cache.beginRevalidation(entryKey) {
                Self.revalidateInBackground(exchange, run: run, conditions: conditions, next: next) { cache.endRevalidation(entryKey) }
            }
            return .answered(hit)
        }
        // Nothing usable stored and only-if-cached: the network is never asked (RFC 9111 §5.2.1.7).
        if case .unavailable = run.action { return .answered(try Self.notCached(accepted: accepted)) }
        if CacheControl(run.requestHeaders).has("only-if-cached") { return .answered(try Self.notCached(accepted: accepted)) }
        if cache.mayStore(run) { exchange.readsBody = true }
        let original = exchange
        var resumed = false
        switch run.action {
        case .resume(let fields):
            // Only the missing bytes are asked for; the answer comes from the combined entry.
            exchange.request.head.headerFields[.range] = fields[.range]
            exchange.request.head.headerFields[.ifRange] = fields[.ifRange]
            exchange.key?.cachePlan = Self.plan(fields)
            exchange.cacheRun = run
            resumed = true
        case .revalidate(let conditions), .serveStale(_, let conditions):
            exchange.request.head.headerFields.append(contentsOf: conditions)
            exchange.key?.cachePlan = Self.plan(conditions)
            exchange.cacheRun = run
            exchange.cacheRun?.action = conditions.isEmpty ? .fetch : .revalidate(conditions)
        case .serve, .fetch, .unavailable:
            exchange.cacheRun = run
        }
        return .network(CacheNetworkRequest(exchange: exchange, original: resumed ? original : nil, run: run))
    }

    /// The answer after the network answered (a stored response for an origin failure under
    /// stale-if-error, the combined entry after a range, or the network's answer); `nil` when a
    /// part came that does not complete the stored one.
    @inline(never)
    private static func answer(afterNetwork outcome: Outcome, _ network: CacheNetworkRequest, cache: ResponseCache) -> Outcome? {
        let run = network.run
        if run.entry != nil, Self.originFailureStatuses.contains(outcome.response.statusCode), let stale = cache.staleOnError(run),
            network.exchange.endpoint.acceptedStatuses.contains(stale.response.statusCode)
        {
            return stale
        }
        if network.original != nil, outcome.response.statusCode == 206, cache.answerAfterNetwork(run, outcome: outcome) == nil {
            return nil
        }
        return Self.answer(run, cache: cache, outcome: outcome)
    }

    /// After the network failed: a stored response for an origin failure under stale-if-error;
    /// the request as the caller asked it when the origin refused the missing range; else the error.
    @inline(never)
    private static func recover<Next: PipelineNext>(
        from failure: any Error, _ network: CacheNetworkRequest, cache: ResponseCache, next: Next
    ) async throws -> Outcome {
        guard let error = failure as? CourierError else { throw failure }
        let run = network.run
        if run.entry != nil, Self.isOriginFailure(error, deadline: network.exchange.request.deadline) {
            // stale-if-error: the origin's failure may be answered by the stored response.
            if let stale = cache.staleOnError(run), network.exchange.endpoint.acceptedStatuses.contains(stale.response.statusCode) {
                return stale
            }
            throw error
        }
        if network.original != nil, error.kind == .httpStatus, (400..<500).contains(error.status?.code ?? 0) {
            // The origin refused the range it was asked for (a 416): the caller never sent one.
            return try await Self.askAsAsked(network, cache: cache, next: next)
        }
        throw error
    }

    /// The caller's own request, when completing a partial entry does not work out.
    @inline(never)
    private static func askAsAsked<Next: PipelineNext>(
        _ network: CacheNetworkRequest, cache: ResponseCache, next: Next
    ) async throws -> Outcome {
        try await Self.fetch(network.original ?? network.exchange, run: network.run, cache: cache, next: next)
    }

    /// The request without the conditional fields the cache added (a caller's own conditions
    /// make the cache step aside, so every one of them is the cache's), as a plain fetch.
    @inline(never)
    private static func askUnconditionally<Next: PipelineNext>(
        _ network: CacheNetworkRequest, cache: ResponseCache, next: Next
    ) async throws -> Outcome {
        var plain = network.exchange
        for name in [HTTPField.Name.ifNoneMatch, .ifModifiedSince] { plain.request.head.headerFields[name] = nil }
        plain.key?.cachePlan = ""
        return try await Self.fetch(plain, run: network.run, cache: cache, next: next)
    }

    /// `exchange` sent as a plain fetch under the run's decision, its answer handled by the cache.
    private static func fetch<Next: PipelineNext>(
        _ exchange: RequestExchange, run planned: CacheRun, cache: ResponseCache, next: Next
    ) async throws -> Outcome {
        var plain = exchange
        var run = planned
        run.action = .fetch
        plain.cacheRun = run
        return try await Self.answer(run, cache: cache, outcome: next(plain))
    }

    /// The fields the cache added to a request, as text for the deduplication key.
    static func plan(_ fields: HTTPFields) -> String {
        fields.map { "\($0.name.canonicalName): \($0.value)" }.joined(separator: "\n")
    }

    /// For a request with a `Range`, or one completing a partial entry: the answer built from the
    /// entry as stored after the network's part arrived (RFC 9111 §3.4), else the network's answer.
    static func answer(_ run: CacheRun, cache: ResponseCache, outcome: Outcome) -> Outcome {
        let resumed: Bool
        if case .resume = run.action { resumed = true } else { resumed = false }
        guard resumed || run.wantedRange != nil, let answer = cache.answerAfterNetwork(run, outcome: outcome) else { return outcome }
        return answer
    }

    /// The statuses after which `stale-if-error` may serve a stored response (RFC 5861 §4).
    static let originFailureStatuses: Set<Int> = [500, 502, 503, 504]

    /// Whether an error means the origin failed or could not be reached (not that the caller
    /// gave up: its cancellation or its own deadline end the call).
    static func isOriginFailure(_ error: CourierError, deadline: ContinuousClock.Instant?) -> Bool {
        switch error.kind {
        case .httpStatus: return error.status.map { Self.originFailureStatuses.contains($0.code) } ?? false
        case .transport: return !Task.isCancelled
        case .timeout: return !Task.isCancelled && !(deadline.map { ContinuousClock.now >= $0 } ?? false)
        default: return false
        }
    }

    /// The answer to `only-if-cached` with nothing usable stored: `504 Gateway Timeout`.
    static func notCached(accepted: Range<Int>) throws -> Outcome {
        let head = HTTPResponse(status: .gatewayTimeout)
        guard accepted.contains(504) else {
            var error = CourierError.httpStatus(head, body: nil)
            error.message = "only-if-cached: no usable stored response (504 generated by the cache)"
            throw error
        }
        var outcome = Outcome(response: RawResponse(head: head, body: .data(Data()), version: .http1_1, url: nil))
        outcome.source = .cache
        return outcome
    }

    /// Revalidates a stale entry that was served, in a task of its own, through the stages
    /// below: deduplication (it joins an identical request in flight), the cache store (which a
    /// `304` refreshes and a `200` replaces), the scheduler and the wire. One runs per entry at a
    /// time (the caller claimed it); `done` ends the claim after the store was updated. Its
    /// deadline is the caller's; it is not cancelled with the caller. A failure leaves the
    /// stored response as it is.
    static func revalidateInBackground<Next: PipelineNext>(
        _ exchange: RequestExchange, run: CacheRun, conditions: HTTPFields, next: Next, done: @escaping @Sendable () -> Void
    ) {
        var background = exchange
        background.request.head.headerFields.append(contentsOf: conditions)
        background.control = nil
        background.readsBody = true
        background.record = ExchangeRecord()
        background.cacheRun = run
        background.cacheRun?.action = conditions.isEmpty ? .fetch : .revalidate(conditions)
        background.key?.cachePlan = Self.plan(conditions)
        // Nobody waits for it: it yields to requests someone waits for.
        background.priorityOverride = .low
        let request = background
        Task {
            defer { done() }
            if let deadline = request.request.deadline, deadline - ContinuousClock.now < Deadline.longest {
                _ = try? await Deadline.run(until: deadline) { try await next(request) }
            } else {
                _ = try? await next(request)
            }
        }
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
    let events: EventHub
    var name: String { "cache-store" }
    var isLinked: Bool { self.cache != nil }

    static var mayBypass: Bool { true }
    func bypasses(_ exchange: RequestExchange) -> Bool { self.cache == nil || !exchange.hasCacheRun }

    @inline(__always)
    func run<Next: PipelineNext>(_ exchange: RequestExchange, next: Next) async throws -> Outcome {
        guard let cache = self.cache, exchange.hasCacheRun else { return try await next(exchange) }
        return try await self.store(exchange, cache: cache, next: next)
    }

    /// The exchange sent, and what it brings stored (apart from `run`: most exchanges carry no
    /// cache decision, and their frame does not hold one).
    @inline(never)
    private func store<Next: PipelineNext>(_ exchange: RequestExchange, cache: ResponseCache, next: Next) async throws -> Outcome {
        guard let run = exchange.cacheRun else { return try await next(exchange) }
        let outcome = try await next(exchange)
        guard self.events.isActive else { return cache.finish(run, outcome: outcome, sentHeaders: exchange.record.sentHeaders) }
        let events = self.events
        return cache.finish(run, outcome: outcome, sentHeaders: exchange.record.sentHeaders) {
            events.emit(exchange.request) { $0.cacheStored($1) }
        }
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

    /// Whether the exchange is one deduplication shares.
    @inline(never)
    private func isShared(_ exchange: RequestExchange) -> Bool {
        self.configuration.isEnabled && exchange.key != nil && Self.shares(exchange)
    }

    /// The exchange sent once for every identical one in flight, or joined to the one that is.
    @inline(never)
    private func share<Next: PipelineNext>(_ exchange: RequestExchange, next: Next) async throws -> Outcome {
        guard let key = exchange.key else { return try await next(exchange) }
        // The closures are made in synchronous helpers: the exchange copies they capture never
        // sit in this async frame.
        let result: (Outcome, coalesced: Bool)
        do {
            result = try await self.deduplicator.run(
                key: key, priority: exchange.priority, deadline: exchange.request.deadline, control: exchange.control,
                requestID: exchange.request.id, onJoin: self.onJoin(exchange), onWaiting: self.onWaiting(exchange),
                fetch: self.fetch(exchange, key: key, next: next)
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
    private func fetch<Next: PipelineNext>(_ exchange: RequestExchange, key: LogicalKey, next: Next) -> Deduplicator.Fetch {
        var sharing = exchange
        sharing.request.deadline = nil
        sharing.control = nil
        sharing.readsBody = true
        let deduplicator = self.deduplicator
        sharing.waitersDeadline = { deduplicator.latestDeadline(key: key) }
        let shared = sharing
        return { ticket, priority in
            var run = shared
            run.ticket = ticket
            run.priorityOverride = priority
            return try await next(run)
        }
    }

    /// Tells the monitors this caller joined a request in flight (`nil`: no monitor listens).
    @inline(never)
    private func onJoin(_ exchange: RequestExchange) -> (@Sendable (RequestID) -> Void)? {
        guard self.events.isActive else { return nil }
        let events = self.events
        let joiner = exchange.request
        return { leader in events.emit(joiner) { monitor, event in monitor.deduplicationJoined(event, sharing: leader) } }
    }

    /// Lets `cancelAll` end this caller's wait.
    @inline(never)
    private func onWaiting(_ exchange: RequestExchange) -> (@escaping @Sendable (CourierError) -> Void) -> Void {
        { [lifecycle = self.lifecycle, ticket = exchange.lifecycleTicket] leave in lifecycle.attach(ticket, leave) }
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

/// Stage 10: the request waits for a slot under the total and per-host limits, highest priority
/// first (FIFO within a priority, with ageing); changes of priority move it while it waits;
/// cancelling or timing out while queued sends nothing and leaves no trace in the queue.
///
/// The slot is held until the body has ended: for collected bodies when they have been read, for
/// streams and downloads when the caller has read the last byte, stopped reading, or dropped the
/// body — so the scheduler never believes a busy connection is free.
struct ScheduleStage: PipelineStage {
    let scheduler: RequestScheduler
    let events: EventHub
    let lifecycle: Lifecycle
    var name: String { "schedule" }

    /// The host a per-host limit counts: the authority with the host in lower case and without
    /// the scheme's default port (RFC 3986 §6.2.2.1, §6.2.3): `EXAMPLE.com:443` over https is
    /// `example.com`. Made without a copy when the authority is already so (the usual case).
    static func hostKey(scheme: String?, authority: String) -> String {
        let bytes = authority.utf8
        var key = bytes.contains(where: { $0 >= UInt8(ascii: "A") && $0 <= UInt8(ascii: "Z") }) ? authority.lowercased() : authority
        let defaultPort = scheme == "https" ? ":443" : scheme == "http" ? ":80" : nil
        if let defaultPort, key.hasSuffix(defaultPort), key.utf8.count > defaultPort.utf8.count {
            key.removeLast(defaultPort.count)
        }
        return key
    }

    @inline(__always)
    func run<Next: PipelineNext>(_ exchange: RequestExchange, next: Next) async throws -> Outcome {
        let scheduler = self.scheduler
        let events = self.events
        let ticket = exchange.ticket ?? scheduler.makeTicket()
        let host = Self.hostKey(scheme: exchange.request.head.scheme, authority: exchange.request.head.authority ?? "")
        if let control = exchange.control {
            control.onPriorityChange { scheduler.reprioritize(ticket: ticket, to: $0) }
        }
        // A suspended client holds what would go to the network here, before it takes a slot.
        if self.lifecycle.isSuspended { try await self.lifecycle.admit() }
        if events.isActive {
            try await self.acquireObserved(exchange, ticket: ticket, host: host)
        } else if !scheduler.tryAcquire(
            ticket: ticket, host: host, priority: exchange.priorityOverride ?? exchange.priority, order: exchange.order)
        {
            try await scheduler.waitForSlot(ticket: ticket)
        }
        // Holding a slot, the request goes on to the wire: room for the frames of the stages
        // below and the transport, in one slab of the task's allocator (see `TaskFrames`).
        await TaskFrames.reserve()
        let outcome: Outcome
        do {
            outcome = try await next(exchange)
        } catch {
            self.release(exchange, host: host, spokeHTTP2: exchange.record.version.map { $0.major >= 2 } ?? false)
            throw error
        }
        return self.released(outcome, exchange: exchange, host: host)
    }

    /// Frees the slot.
    @inline(never)
    private func release(_ exchange: RequestExchange, host: String, spokeHTTP2: Bool) {
        self.scheduler.release(host: host, spokeHTTP2: spokeHTTP2)
        self.events.emit(exchange.request) { $0.slotReleased($1, host: host) }
    }

    /// The outcome, its slot freed now (a body in memory) or once its streamed body has ended.
    @inline(never)
    private func released(_ outcome: consuming Outcome, exchange: RequestExchange, host: String) -> Outcome {
        let spokeHTTP2 = outcome.response.version.major >= 2
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

/// What the cache lookup decided before the network.
private enum CacheDecision {
    /// The cache answers; the network is not asked.
    case answered(Outcome)
    /// The network is asked.
    case network(CacheNetworkRequest)
}

/// An exchange the cache lookup sends to the network, with its decision (one object, so that
/// the lookup's async frame holds one reference, not three large values).
private final class CacheNetworkRequest: Sendable {
    /// The exchange as sent: validators or the missing range added.
    let exchange: RequestExchange
    /// The exchange as the caller asked it, when completing a partial entry (`nil` otherwise).
    let original: RequestExchange?
    /// The cache's decision.
    let run: CacheRun

    init(exchange: RequestExchange, original: RequestExchange?, run: CacheRun) {
        self.exchange = exchange
        self.original = original
        self.run = run
    }
}
