import Foundation
import HTTPTypes

/// The request pipeline: every stage a request goes through, in order, written down in one place.
///
/// Going down (app → wire), each stage does its work and calls the next; coming back up
/// (wire → app), the response passes the same stages in reverse order. `send`, `response`,
/// `start`, `updates`, `upload`, `stream` and `download` all run this one list; a stage that does
/// nothing for a kind of exchange (a streamed body is neither cached nor shared) says so in its
/// own documentation.
///
/// | # | stage | down (request) | up (response) |
/// |---|---|---|---|
/// | 1 | ``ClassifyStage`` | — | errors get their presentation and raise their event |
/// | 2 | ``BuildStage`` | endpoint → the *logical* request (no wire id, no auth, no signature) and its key | — |
/// | 3 | ``ObserveStage`` | the "request started" event ("→" log line) | the "finished", "failed" or "cancelled" event ("←" line) |
/// | 3½ | ``LifecycleStage`` | a ticket, so `cancelAll` reaches the request; refused after `shutdown` | a request `cancelAll` ended fails with its reason |
/// | 4 | ``DeadlineStage`` | starts this caller's deadline | everything below, body included, must end by it |
/// | 5 | ``DecodeStage`` | — | the payload becomes the endpoint's value (per caller) |
/// | 6 | ``ConstrainedStage`` | prefetches refused or deferred in Low Data Mode | — |
/// | 7 | ``CacheLookupStage`` | a stored response may answer; stale ones get validators | — |
/// | 8 | ``DeduplicationStage`` | an identical logical request in flight is joined | the shared bytes go to every waiter |
/// | 9 | ``CacheStoreStage`` | — | stores what passed the status check and unboxing; a 304 refreshes |
/// | 10 | ``ScheduleStage`` | waits for a slot by priority | the slot is freed once the body has ended |
/// | 11 | ``WireStage`` | boxes for the wire (the JSON-RPC id is assigned here) | unboxes: business and RPC errors |
/// | 12 | ``StatusCheckStage`` | — | a status the endpoint does not accept throws `httpStatus` |
/// | 13 | ``CollectBodyStage`` | — | reads the body up to the size limit |
/// | 14 | ``ContentDecodingStage`` | — | removes gzip, deflate, br or zstd within the bomb limits |
/// | 15 | ``MiddlewareStage`` (client) | the client's middleware, in order | in reverse order |
/// | 16 | ``MiddlewareStage`` (endpoint) | the endpoint's middleware: auth and signing see the bytes sent | in reverse order |
/// | 17 | ``RetryStage`` | — | a failed attempt may be sent again, after a backoff |
/// | 18 | ``RedirectStage`` | — | 3xx followed; a same-origin hop passes the per-hop middleware again |
/// | 19 | ``CookieStage`` | the jar's cookies for this hop's URL | `Set-Cookie` stored, a redirect's too |
/// | 20 | ``TransportStage`` | the request goes on the wire | the head arrives; the body streams |
///
/// A stage whose feature the client's configuration leaves off (no cache store, deduplication
/// off, no client middleware, no cookie jar) stays in ``stages`` but is not linked
/// (``PipelineStage/isLinked``): it could do nothing for any request of this client. The stages
/// are fused at compile time into two segments (``Fused``), stages 1–6 and 10–20, so a stage
/// costs no async call and no frame of its own: the second segment is one async function; the
/// first is one down to the deadline stage, which runs the decode and constrained stages in the
/// task it starts (or in its waiter path), fused into that task's one function. Client middleware
/// and cookies are fused into the second segment and pass the exchange on when off. Stages 7–9
/// are links of their own between the segments, present only when their feature is on.
///
/// Every error leaving a stage is a ``CourierError`` carrying an ``ErrorContext``: endpoint name,
/// request id, redacted URL, attempt and the stage that failed (for a middleware, its type name).
final class Pipeline: Sendable {
    /// The stages, outermost first: every one, in the order of the table above, whether or not
    /// it is linked for this client (``linkedStages``).
    let stages: [any PipelineStage]

    /// The stages that can act for this client, outermost first: ``stages`` without those whose
    /// feature the configuration leaves off (those are either left out of the chain or, fused
    /// into a segment, pass every exchange on).
    var linkedStages: [any PipelineStage] { self.stages.filter(\.isLinked) }
    private let entry: PipelineStageNext

    init(client: ClientParts) {
        let configuration = client.configuration
        let middleware = configuration.middleware
        let classify = ClassifyStage(classifier: configuration.errorClassifier, onEvent: configuration.onEvent)
        let build = BuildStage(parts: client)
        let observe = ObserveStage(events: client.events)
        let lifecycle = LifecycleStage(lifecycle: client.lifecycle)
        let deadline = DeadlineStage(
            bodyIdleTimeout: configuration.bodyIdleTimeout, deduplication: configuration.deduplication, lifecycle: client.lifecycle)
        let decode = DecodeStage(decoder: configuration.decoder, values: client.decodedValues, events: client.events)
        let constrained = ConstrainedStage(gate: client.constrained, policy: configuration.constrainedPolicy)
        let cacheLookup = CacheLookupStage(cache: client.cache, events: client.events)
        let deduplication = DeduplicationStage(
            deduplicator: client.deduplicator, configuration: configuration.deduplication, events: client.events,
            lifecycle: client.lifecycle)
        let cacheStore = CacheStoreStage(cache: client.cache, events: client.events)
        let schedule = ScheduleStage(scheduler: client.scheduler, events: client.events, lifecycle: client.lifecycle)
        let wire = WireStage(configuration: configuration, callIDs: client.callIDs)
        let statusCheck = StatusCheckStage(maxResponseSize: configuration.maxResponseSize)
        let collectBody = CollectBodyStage(maxResponseSize: configuration.maxResponseSize)
        let contentDecoding = ContentDecodingStage(limits: configuration.decompression, maxResponseSize: configuration.maxResponseSize)
        let clientMiddleware = MiddlewareStage(scope: .client, clientMiddleware: middleware, events: client.events)
        let endpointMiddleware = MiddlewareStage(scope: .endpoint, clientMiddleware: [], events: client.events)
        let retry = RetryStage(
            defaultPolicy: configuration.retry, budget: client.retryBudget, events: client.events, clientMiddleware: middleware)
        let redirect = RedirectStage(policy: configuration.redirects, clientMiddleware: middleware, events: client.events)
        let cookies = CookieStage(jar: configuration.cookies)
        let transport = TransportStage(transport: configuration.transport, events: client.events)
        self.stages = [
            classify, build, observe, lifecycle, deadline, decode, constrained, cacheLookup, deduplication, cacheStore, schedule,
            wire, statusCheck, collectBody, contentDecoding, clientMiddleware, endpointMiddleware, retry, redirect, cookies, transport,
        ]

        // The chain, built from the bottom up. The stages every client has are fused into
        // segments at compile time (``Fused``): one async function per segment, so one frame
        // where a chain of links would allocate one per stage. Client middleware and cookies are
        // fused too: without them their stages pass the exchange on, at the cost of a branch.
        // The cache and deduplication stages, whose runs call the stages below from several
        // places (which fusing would copy), are links of their own between two segments, linked
        // only when their feature is on (``PipelineStage/isLinked``).
        var next = PipelineStageNext(PipelineLink.end)
        next = Self.segment(
            Fused(
                schedule,
                Fused(
                    wire,
                    Fused(
                        statusCheck,
                        Fused(
                            collectBody,
                            Fused(
                                contentDecoding,
                                Fused(
                                    clientMiddleware,
                                    Fused(
                                        endpointMiddleware,
                                        Fused(retry, Fused(redirect, Fused(cookies, Fused(transport, next)))))))))))
        )
        next = Self.link(cacheStore, next)
        next = Self.link(deduplication, next)
        next = Self.link(cacheLookup, next)
        next = Self.segment(
            Fused(classify, Fused(build, Fused(observe, Fused(lifecycle, Fused(deadline, Fused(decode, Fused(constrained, next))))))))
        self.entry = next
    }

    /// Runs an exchange through every stage.
    func run(_ exchange: RequestExchange) async throws -> Outcome {
        try await self.entry(exchange)
    }

    /// The names of the stages that can act for this client, in the order the chain calls them
    /// (what ``linkedStages`` lists, read from the chain itself; a fused stage whose feature is
    /// off is called but not named).
    var chainedStageNames: [String] { self.entry.link.stageNames }

    /// `stage` as a link of its own, or `next` alone when the stage is not linked for this client.
    private static func link<Stage: PipelineStage>(_ stage: Stage, _ next: PipelineStageNext) -> PipelineStageNext {
        guard stage.isLinked else { return next }
        let bypasses: (@Sendable (RequestExchange) -> Bool)? = Stage.mayBypass ? { @Sendable exchange in stage.bypasses(exchange) } : nil
        return PipelineStageNext(
            PipelineLink(below: next.link, bypasses: bypasses, names: [stage.name] + next.stageNames) { exchange in
                do {
                    return try await stage.run(exchange, next: next)
                } catch {
                    throw StageErrors.attach(error, stage: stage, exchange: exchange)
                }
            })
    }

    /// A segment of fused stages as one link. (A closure made here, where the chain's type is
    /// known, so the compiler specialises the whole segment; a generic class's methods would not
    /// be: its vtable holds the unspecialised ones.)
    private static func segment<Chain: PipelineNext>(_ chain: Chain) -> PipelineStageNext {
        PipelineStageNext(
            PipelineLink(below: nil, bypasses: nil, names: chain.stageNames) { exchange in
                try await chain(exchange)
            })
    }
}

/// What runs the stages below a stage: a link of the chain (``PipelineStageNext``), or the
/// stages below fused into the caller at compile time (``Fused``).
protocol PipelineNext: Sendable {
    /// Runs the exchange through the stages below.
    func callAsFunction(_ exchange: RequestExchange) async throws -> Outcome
    /// The names of the stages below, in order, down to the end of the chain.
    var stageNames: [String] { get }
}

/// A stage with the stages below it fused in at compile time: its `run` gets them as a concrete
/// `next`, so the compiler inlines them into the function that calls `next` (one frame for the
/// lot instead of one per stage; measured: Benchmarks/README.md, "Performance choices in the
/// code"). Errors leaving the stage get its name, as a link's do.
struct Fused<Stage: PipelineStage, Below: PipelineNext>: PipelineNext {
    let stage: Stage
    let below: Below

    init(_ stage: Stage, _ below: Below) {
        self.stage = stage
        self.below = below
    }

    @inline(__always)
    func callAsFunction(_ exchange: RequestExchange) async throws -> Outcome {
        do {
            return try await self.stage.run(exchange, next: self.below)
        } catch {
            throw StageErrors.attach(error, stage: self.stage, exchange: exchange)
        }
    }

    /// A stage whose feature is off runs (and passes the exchange on) but is not named: it is
    /// not linked in the sense of ``PipelineStage/isLinked``.
    var stageNames: [String] { self.stage.isLinked ? [self.stage.name] + self.below.stageNames : self.below.stageNames }
}

extension PipelineNext {
    /// Runs the exchange through the stages below, in a function of its own: for the paths a
    /// stage rarely takes (a retry, a redirect, a wire protocol's boxing, middleware). A fused
    /// segment inlines the stages below at every place a stage calls them; calling them from
    /// the rare paths through this one specialised function keeps the segment's code from
    /// doubling at each stage that has such a path.
    @inline(never)
    func outOfLine(_ exchange: RequestExchange) async throws -> Outcome {
        try await self(exchange)
    }
}

/// Puts a stage's name and the exchange's context on an error leaving the stage.
private enum StageErrors {
    /// The error with the stage's name and the exchange's context (apart from the callers, so
    /// that its values stay out of their async frames).
    @inline(never)
    static func attach<Stage: PipelineStage>(_ error: any Error, stage: Stage, exchange: RequestExchange) -> any Error {
        ErrorContext.attach(error, stage: stage.name, exchange: exchange)
    }
}

/// The rest of the pipeline below a stage: call it with the exchange to run every stage below.
///
/// A reference to the next link, whose `run` is a closure made where the stage types are known
/// (so it is specialised for them).
struct PipelineStageNext: PipelineNext {
    fileprivate let link: PipelineLink

    fileprivate init(_ link: PipelineLink) {
        self.link = link
    }

    /// Runs the exchange through the stages below.
    ///
    /// The stages that have nothing to do for this exchange (``PipelineStage/bypasses(_:)``)
    /// are stepped over here, before the one async call: a stage that would only pass the
    /// exchange on costs no call and no frame (measured: Benchmarks/README.md, "Performance
    /// choices in the code").
    /// Inlined into the stage that calls it, so a link costs one async call, not two.
    @inline(__always)
    func callAsFunction(_ exchange: RequestExchange) async throws -> Outcome {
        var link = self.link
        while let bypasses = link.bypasses, let below = link.below, bypasses(exchange) {
            link = below
        }
        return try await link.run(exchange)
    }

    var stageNames: [String] { self.link.stageNames }
}

/// One link of the chain: one stage, or a segment of fused stages (``Fused``), with the rest of
/// the chain below it. Made only in generic functions called with the concrete stage types, so
/// each link's `run` is specialised for its stages.
private final class PipelineLink: Sendable {
    /// For a stage that can have nothing to do for some exchanges: whether it has nothing to do
    /// for this one (then the chain goes straight to ``below``).
    let bypasses: (@Sendable (RequestExchange) -> Bool)?
    /// The link below (for a single stage; a segment has none, its last stage calls it).
    let below: PipelineLink?
    let run: @Sendable (RequestExchange) async throws -> Outcome
    /// The names of this link's stages and of all below it.
    let stageNames: [String]

    init(
        below: PipelineLink?, bypasses: (@Sendable (RequestExchange) -> Bool)?, names: [String],
        run: @escaping @Sendable (RequestExchange) async throws -> Outcome
    ) {
        self.below = below
        self.bypasses = bypasses
        self.stageNames = names
        self.run = run
    }

    /// The end of the chain, after the last stage: reached only if the list had no transport stage.
    static let end = PipelineLink(below: nil, bypasses: nil, names: []) { _ in
        throw CourierError(.invalidRequest, "the pipeline ended without a transport")
    }
}

/// One step of the pipeline, with one job.
protocol PipelineStage: Sendable {
    /// The stage's name in errors (``ErrorContext/stage``).
    var name: String { get }
    /// Whether the stage can do anything for this client: `false` when its feature is switched
    /// off in the configuration (no cookie jar, no cache, no client middleware, deduplication
    /// off), and then it stays in ``Pipeline/stages`` but is not linked into the chain (a stage
    /// fused into a segment is still called, and passes every exchange on).
    var isLinked: Bool { get }
    /// Whether the stage may have nothing to do for some exchanges (``bypasses(_:)``). Asked only
    /// of the stages that are links of their own (cache lookup, deduplication, cache store); a
    /// fused stage costs no call to step over, and its `run` checks for itself.
    static var mayBypass: Bool { get }
    /// Whether the stage has nothing to do for `exchange`, which then goes straight to the stage
    /// below: a quick synchronous check (`run` must still pass such an exchange on unchanged).
    func bypasses(_ exchange: RequestExchange) -> Bool
    /// Does the stage's work on the way down, calls `next`, and its work on the way up.
    func run<Next: PipelineNext>(_ exchange: RequestExchange, next: Next) async throws -> Outcome
}

extension PipelineStage {
    var isLinked: Bool { true }
    static var mayBypass: Bool { false }
    func bypasses(_ exchange: RequestExchange) -> Bool { false }
}

/// How much of the response the caller takes.
enum ExchangeMode: Sendable, Equatable {
    /// The body is read into memory, checked, unboxed, maybe cached and decoded.
    case collect
    /// The caller reads the body as it arrives (``Client/stream(_:)``): not cached, not shared,
    /// not unboxed; the scheduler slot is held until the body ends.
    case stream
    /// A download: streamed like ``stream``, and the content coding is kept (ranges count the
    /// bytes on disk); the download logs its own end.
    case download

    var isStream: Bool { self != .collect }
}

/// One caller's request on its way through the stages.
///
/// Stages copy it as they change it, and async frames hold copies, so what never changes along
/// the exchange lives in one shared object (``Fixed``) and the cache's decision in a box: the
/// value stays small and cheap to copy.
struct RequestExchange: Sendable {
    /// The parts of an exchange that never change once it is made.
    final class Fixed: Sendable {
        let endpoint: EndpointDescription
        let mode: ExchangeMode
        let cachePolicy: CachePolicy
        let uploadReporter: ProgressReporter?
        let adjust: (@Sendable (inout Request) -> Void)?
        let start: ContinuousClock.Instant
        /// The request's place in the scheduler's line, taken when `start` was called; kept by a
        /// shared (deduplicated) exchange, which has no control of its own.
        let order: UInt64?

        init(
            endpoint: EndpointDescription, mode: ExchangeMode, cachePolicy: CachePolicy, uploadReporter: ProgressReporter?,
            adjust: (@Sendable (inout Request) -> Void)?, start: ContinuousClock.Instant, order: UInt64?
        ) {
            self.endpoint = endpoint
            self.mode = mode
            self.cachePolicy = cachePolicy
            self.uploadReporter = uploadReporter
            self.adjust = adjust
            self.start = start
            self.order = order
        }
    }

    /// A cache decision, boxed (it is large and most exchanges never carry one).
    final class CacheRunBox: Sendable {
        let run: CacheRun
        init(_ run: CacheRun) { self.run = run }
    }

    private let fixed: Fixed
    /// What the endpoint asks for, without its response type.
    var endpoint: EndpointDescription { self.fixed.endpoint }
    var mode: ExchangeMode { self.fixed.mode }
    /// The request: logical from the build stage on, boxed for the wire from the wire stage on.
    var request: Request
    /// The logical request's identity for deduplication, set by the build stage.
    var key: LogicalKey?
    /// The cache partition, read once by the build stage.
    var partition = ""
    /// What the wire stage does to the request, as text (see ``RequestBuilder/wireIdentity(of:configuration:)``).
    var wireIdentity = ""
    private var cacheRunBox: CacheRunBox?
    /// The cache's decision for this request, set by the cache lookup stage.
    var cacheRun: CacheRun? {
        get { self.cacheRunBox?.run }
        set { self.cacheRunBox = newValue.map(CacheRunBox.init) }
    }
    /// Whether a response with `status` is the 304 that answers the cache's own revalidation
    /// (read in the box, without copying the decision out).
    func answersRevalidation(status: Int) -> Bool {
        guard status == 304, let box = self.cacheRunBox else { return false }
        return ResponseCache.isNotModified(box.run, status: status)
    }
    /// Whether the cache made a decision for this request.
    var hasCacheRun: Bool { self.cacheRunBox != nil }
    /// The cache policy in force (the endpoint's, an override, or the client's).
    var cachePolicy: CachePolicy { self.fixed.cachePolicy }
    /// The wire protocol and call, set by the wire stage (`nil` protocol: REST pass-through).
    var wire: (any WireProtocol)?
    var call: WireCall
    /// The caller's live priority; `nil` for a shared exchange, whose priority the deduplicator owns.
    var control: RequestControl?
    /// The priority a shared (deduplicated) exchange runs at: the highest of its waiters'.
    var priorityOverride: RequestPriority?
    /// The scheduler ticket, when made before scheduling (a shared exchange's).
    var ticket: UInt64?
    /// Whether the body must be read even when the status is accepted and the decoding ignores it
    /// (a wire protocol, the cache or other waiters need it).
    var readsBody: Bool
    /// For a shared exchange (which has no deadline of its own): the latest deadline among its waiters.
    var waitersDeadline: (@Sendable () -> ContinuousClock.Instant?)?
    /// Upload progress, when the caller asked for it.
    var uploadReporter: ProgressReporter? { self.fixed.uploadReporter }
    /// A last change to the logical request (a download's `Range`).
    var adjust: (@Sendable (inout Request) -> Void)? { self.fixed.adjust }
    /// What happened on the wire, shared by the stages below middleware and the ones above it.
    var record: ExchangeRecord
    var start: ContinuousClock.Instant { self.fixed.start }
    /// The request's place in the scheduler's line, when it was numbered as it was called.
    var order: UInt64? { self.fixed.order }
    /// 0 for the request, 1, 2, … for the redirect hops after it (set by the redirect stage).
    var hop = 0
    /// The caller's ticket in the client's lifecycle (set by the lifecycle stage).
    var lifecycleTicket: UInt64?

    init(
        endpoint: EndpointDescription, mode: ExchangeMode, request: Request, cachePolicy: CachePolicy, call: WireCall,
        control: RequestControl?, readsBody: Bool, uploadReporter: ProgressReporter?, adjust: (@Sendable (inout Request) -> Void)?,
        record: ExchangeRecord, start: ContinuousClock.Instant
    ) {
        self.fixed = Fixed(
            endpoint: endpoint, mode: mode, cachePolicy: cachePolicy, uploadReporter: uploadReporter, adjust: adjust, start: start,
            order: control?.order)
        self.request = request
        self.call = call
        self.control = control
        self.readsBody = readsBody
        self.record = record
    }

    var priority: RequestPriority { self.control?.priority ?? self.endpoint.priority }

    /// The time left for this exchange: until its deadline, or a shared one's waiters' latest.
    var timeLeft: Duration? {
        if let left = self.request.remainingTime { return left }
        guard let deadline = self.waitersDeadline?() else { return nil }
        let left = deadline - ContinuousClock.now
        return left > .zero ? left : .zero
    }
}

/// What comes back up the stages (small, like ``RequestExchange``: the request it carries at the end is boxed).
struct Outcome: Sendable {
    final class RequestBox: Sendable {
        let request: Request
        init(_ request: Request) { self.request = request }
    }

    /// The response: its body in memory once the collect stage has run (collect mode), streaming otherwise.
    var response: RawResponse
    var source: ResponseSource = .network
    /// The age of a stored response, in seconds.
    var age: TimeInterval?
    /// The store key of a response from the cache (to reuse decoded values).
    var cacheKey: String?
    /// The payload after unboxing; `nil` means the body itself.
    var payload: Data?
    /// Whether the cache may store the payload (its wire protocol allows it).
    var payloadMayBeCached = true
    /// The decoded value, set by the decode stage.
    var value: (any Sendable)?
    private var requestBox: RequestBox?
    /// The logical request, the URL that answered and the time taken, set by the observe stage.
    var request: Request? {
        get { self.requestBox?.request }
        set { self.requestBox = newValue.map(RequestBox.init) }
    }
    private var storedURLString: String?
    /// The URL that answered, as text: the response's, else the request's (worked out when
    /// read: `send` never reads it, and making the text has a cost; measured:
    /// Benchmarks/README.md, "Performance choices in the code").
    var urlString: String {
        get { self.storedURLString ?? self.response.url?.absoluteString ?? self.request?.urlString ?? "" }
        set { self.storedURLString = newValue }
    }
    var duration: Duration = .zero
    /// The caller's record of the wire exchange, set by the observe stage.
    var record: ExchangeRecord?

    init(response: RawResponse) {
        self.response = response
    }

    /// The body in memory (empty for a streaming body).
    var body: Data { self.response.body.bytes ?? Data() }
}

/// Facts about the wire exchange that travel around the middleware (which sees only requests and
/// responses): the request as sent, the attempt number, and what arrived.
///
/// Unchecked: its fields are written and read one stage after another along one exchange (each
/// read happens after the awaited call that wrote it returned), never concurrently; a shared
/// (deduplicated) exchange writes them in its own task before its waiters are resumed.
final class ExchangeRecord: @unchecked Sendable {
    /// The header fields of the last request handed to the transport.
    private(set) var sentHeaders: HTTPFields?
    private(set) var attempt = 1
    private(set) var status: Int?
    private(set) var version: HTTPVersion?
    /// What monitors read at the end (written only when a monitor listens): the body of the
    /// last request sent, the time spent queued, and from sending the last attempt to its head.
    private(set) var sentBody: Data?
    var queued: Duration = .zero
    private(set) var wait: Duration?
    private var sentAt: ContinuousClock.Instant?

    func sent(_ request: Request, observed: Bool = false) {
        self.sentHeaders = request.head.headerFields
        if observed {
            self.sentBody = request.body?.sentBytes
            self.sentAt = .now
        }
    }

    func received(status: Int, version: HTTPVersion, observed: Bool = false) {
        self.status = status
        self.version = version
        if observed, let sentAt { self.wait = .now - sentAt }
    }

    func setAttempt(_ attempt: Int) {
        self.attempt = attempt
    }
}

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
