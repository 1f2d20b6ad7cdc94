import Foundation
import HTTPTypes

/// The cache is consulted under the exchange's ``CachePolicy``, with the *logical*
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
    /// Background revalidations run under a lifecycle ticket of their own, so `cancelAll` and
    /// `shutdown` reach them.
    let lifecycle: Lifecycle
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
        let outcome: Outcome
        do {
            outcome = try await next(exchange)
        } catch {
            cache.invalidateAfter(exchange.request, failure: error, record: exchange.record, policy: exchange.cachePolicy)
            throw error
        }
        cache.invalidateAfter(exchange.request, answer: outcome.response.head, policy: exchange.cachePolicy)
        if let redirect = exchange.record.followedRedirect {
            // The redirect answered the request (a 303 to a 404 the endpoint accepts).
            cache.invalidateAfter(exchange.request, answer: HTTPResponse(status: .init(code: redirect)), policy: exchange.cachePolicy)
        }
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
        switch try Self.decide(exchange, cache: cache, lifecycle: self.lifecycle, next: next) {
        case .answered(let outcome): return outcome
        case .network(let request): network = request
        }
        let outcome: Outcome
        do {
            outcome = try await next(network.exchange)
        } catch {
            return try await Self.recover(from: error, network, cache: cache, next: next)
        }
        if outcome.source == .network || outcome.source == .coalesced, outcome.response.statusCode == 304,
            case .revalidate? = network.exchange.cacheRun?.action
        {
            // A 304 the cache did not take (its validator is not the stored response's): the
            // caller asked for the resource, not for a 304 — nor did a caller that shared the
            // revalidation of another (its copy is `coalesced`).
            return try await Self.askUnconditionally(network, cache: cache, next: next)
        }
        if let answer = Self.answer(afterNetwork: outcome, network, cache: cache) { return answer }
        // The origin sent a part that does not complete the stored one, or refused the range:
        // ask as the caller did.
        await outcome.response.body.discard()
        return try await Self.askAsAsked(network, cache: cache, next: next)
    }

    /// What the cache does before the network: answer (a usable stored response, or the 504 of
    /// `only-if-cached`), or send the exchange with its decision.
    @inline(never)
    private static func decide<Next: PipelineNext>(
        _ asked: RequestExchange, cache: ResponseCache, lifecycle: Lifecycle, next: Next
    ) throws -> CacheDecision {
        var exchange = asked
        var planned = cache.begin(
            exchange.request, policy: exchange.cachePolicy, partition: exchange.partition, wire: exchange.wireIdentity,
            endpointHasMiddleware: !exchange.endpoint.middleware.isEmpty)
        let accepted = exchange.endpoint.acceptedStatuses
        // Completing a partial entry brings a 206, which the endpoint must accept.
        if case .resume = planned.action, !accepted.contains(206) { planned.action = .fetch }
        // A 304 would confirm the stored response with its status (RFC 9111 §4.3.4), so a stored
        // status this endpoint does not accept (another endpoint's 404) is not revalidated: the
        // resource is fetched without conditions. For a range, the status is the one the cache
        // answers with (a stored 200 answers it as a 206), looked at only when it matters.
        switch planned.action {
        case .revalidate, .serveStale:
            if let entry = planned.entry {
                let status = planned.wantedRange.flatMap { CacheRules.answer(from: entry, wanted: $0)?.status } ?? entry.status
                if !accepted.contains(status) { planned.action = .fetch }
            }
        default: break
        }
        let run = planned
        // A stored status this endpoint does not accept (another endpoint's 404) is not an answer.
        if let hit = cache.served(run), accepted.contains(hit.response.statusCode) {
            if case .serveStale(_, let conditions) = run.action, let entryKey = run.entryKey, cache.beginRevalidation(entryKey) {
                Self.revalidateInBackground(exchange, run: run, conditions: conditions, lifecycle: lifecycle, next: next) {
                    cache.endRevalidation(entryKey)
                }
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
        if run.entry != nil, Self.originFailureStatuses.contains(outcome.response.statusCode),
            let stale = cache.stale(run, because: .originError),
            network.exchange.endpoint.acceptedStatuses.contains(stale.response.statusCode)
        {
            return stale
        }
        if network.original != nil, outcome.response.statusCode == 206, cache.answerAfterNetwork(run, outcome: outcome) == nil {
            return nil
        }
        // The origin refused the range the cache added (a 416 the endpoint accepts): it is no
        // answer to the caller, who sent none (RFC 9110 §15.5.17). (Any other status answers
        // the caller: a 429 or a 404 is the resource's, not the range's.)
        if network.original != nil, outcome.response.statusCode == 416 { return nil }
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
        if run.entry != nil, Self.isDisconnected(error), let stale = cache.stale(run, because: .disconnected),
            network.exchange.endpoint.acceptedStatuses.contains(stale.response.statusCode)
        {
            // RFC 9111 §4.2.4: the origin could not be reached at all.
            return stale
        }
        if run.entry != nil, Self.isOriginFailure(error, deadline: network.exchange.request.deadline) {
            // stale-if-error: the origin's failure may be answered by the stored response.
            if let stale = cache.stale(run, because: .originError),
                network.exchange.endpoint.acceptedStatuses.contains(stale.response.statusCode)
            {
                return stale
            }
            throw error
        }
        if network.original != nil, error.kind == .httpStatus, error.status?.code == 416 {
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

    /// Whether an error means this request's origin could not be reached at all: its own
    /// transport says the connection failed before any byte of a response (refused, reset or
    /// closed, no such name, no route: `couldNotConnect`) — not a timeout, not an error status,
    /// not a malformed answer, not a body cut short, not a nested request's failure (a token
    /// endpoint's), and not the caller's cancellation.
    static func isDisconnected(_ error: CourierError) -> Bool {
        error.kind == .transport && error.isFromTransport && error.couldNotConnect && !Task.isCancelled
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
        _ exchange: RequestExchange, run: CacheRun, conditions: HTTPFields, lifecycle: Lifecycle, next: Next,
        done: @escaping @Sendable () -> Void
    ) {
        // A client shut down starts no more work; `cancelAll` reaches this one through its ticket
        // (held by a suspended client, say, it must not go to the network on `resume()`).
        guard let ticket = try? lifecycle.begin() else {
            done()
            return
        }
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
        let task = Task {
            defer {
                lifecycle.end(ticket)
                done()
            }
            if let deadline = request.request.deadline, deadline - ContinuousClock.now < Deadline.longest {
                _ = try? await Deadline.run(until: deadline) { try await next(request) }
            } else {
                _ = try? await next(request)
            }
        }
        lifecycle.attach(ticket) { _ in task.cancel() }
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
