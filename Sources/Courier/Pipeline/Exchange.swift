import Foundation
import HTTPTypes

/// How much of the response the caller takes.
enum ExchangeMode: Sendable, Equatable {
    /// The body is read into memory, checked, unboxed, maybe cached and decoded.
    case collect
    /// The caller reads the body as it arrives (``Client/stream(_:)``): not cached, not shared,
    /// not unboxed; the scheduler slot is held until the body ends.
    case stream
    /// A download: streamed like ``stream``, and the content coding is kept (ranges count the
    /// bytes on disk); the download reports its own start and end, once for all its rounds.
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
    /// For a shared exchange (which has no deadline of its own), the deduplicator that knows its
    /// waiters' latest deadline (a reference, not a closure: nothing to allocate per request).
    var sharedBy: Deduplicator?
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
        guard let key = self.key, let deadline = self.sharedBy?.latestDeadline(key: key) else { return nil }
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
    /// Why a stored response past its freshness answered (source `.stale`).
    var staleReason: StaleReason?
    /// The store key of a response from the cache (to reuse decoded values).
    var cacheKey: String?
    /// The payload after unboxing; `nil` means the body itself.
    var payload: Data?
    /// Whether the cache may store the payload (its wire protocol allows it).
    var payloadMayBeCached = true
    /// Whether the body was discarded unread (nobody needed it): it is no response to store.
    var bodyDiscarded = false
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
/// Unchecked: its fields are read and written under `lock`. Mostly one stage after another along
/// one exchange, but not always: a caller that leaves a shared (deduplicated) request early — its
/// deadline, a cancellation — reads them while the shared request, still running in its own task,
/// may write them.
final class ExchangeRecord: @unchecked Sendable {
    private struct Fields {
        var sentHeaders: HTTPFields?
        /// The URL of the last hop sent, when monitors listen (after redirects: where a failure
        /// after them happened).
        var sentURL: String?
        var attempt = 1
        var status: Int?
        var version: HTTPVersion?
        var sentBody: Data?
        var queued: Duration = .zero
        var wait: Duration?
        var sentAt: ContinuousClock.Instant?
        var followedRedirect: Int?
        /// The redirects followed, with only the fields that say how long they may be reused.
        var redirects: [HTTPResponse] = []
    }

    /// The scheduler slot an exchange holds: whose host, under which ticket, and whether a
    /// redirect has moved it from the host it was taken for.
    struct SlotHold {
        var host: String
        var ticket: UInt64
        var moved = false
    }

    private let lock = NSLock()
    private var fields = Fields()
    /// Apart from `fields` (under the same lock), so that reading it copies nothing else: the
    /// schedule and redirect stages read it for every request.
    private var heldSlot: SlotHold?
    /// The wait for another host's slot that failed (cancelled) and left the exchange holding
    /// none: the next attempt sent (a middleware's own resend) takes a slot again.
    private var lostSlot: SlotHold?
    /// Attempts inside the redirect stage now (more than one when a middleware sends two at once).
    private var attemptsUnderWay = 0

    private func read<Value>(_ value: (Fields) -> Value) -> Value {
        self.lock.lock()
        defer { self.lock.unlock() }
        return value(self.fields)
    }

    private func write(_ change: (inout Fields) -> Void) {
        self.lock.lock()
        defer { self.lock.unlock() }
        change(&self.fields)
    }

    /// The header fields of the last request handed to the transport.
    var sentHeaders: HTTPFields? { self.read(\.sentHeaders) }
    var attempt: Int { self.read(\.attempt) }
    var status: Int? { self.read(\.status) }
    var version: HTTPVersion? { self.read(\.version) }
    /// What monitors read at the end (written only when a monitor listens): the body of the
    /// last request sent, the time spent queued, and from sending the last attempt to its head.
    var sentBody: Data? { self.read(\.sentBody) }
    var queued: Duration {
        get { self.read(\.queued) }
        set { self.write { $0.queued = newValue } }
    }
    var wait: Duration? { self.read(\.wait) }

    func sent(_ request: Request, observed: Bool = false) {
        let headers = request.head.headerFields
        let body = observed ? request.body?.sentBytes : nil
        let url = observed ? request.urlString : nil
        self.write { fields in
            fields.sentHeaders = headers
            if observed {
                fields.sentBody = body
                fields.sentURL = url
                fields.sentAt = .now
            }
        }
    }

    var sentURL: String? { self.read(\.sentURL) }

    func received(status: Int, version: HTTPVersion, observed: Bool = false) {
        self.write { fields in
            fields.status = status
            fields.version = version
            if observed, let sentAt = fields.sentAt { fields.wait = .now - sentAt }
        }
    }

    /// The status of the first redirect followed for the exchange: the server answered the
    /// request (RFC 9111 §4.4 has an unsafe one invalidate), whatever the chain brought after.
    var followedRedirect: Int? { self.read(\.followedRedirect) }

    func followed(redirect status: Int) {
        self.write { fields in
            if fields.followedRedirect == nil { fields.followedRedirect = status }
        }
    }

    /// The redirects followed for the exchange's latest attempt (a middleware's own resends
    /// included), each with only its status, the fields that say how long it may be reused, and
    /// its target resolved in `Location`: the cache limits the final response's freshness by
    /// them, and invalidates the hops an unsafe request reached.
    var redirects: [HTTPResponse] { self.read(\.redirects) }

    /// Notes the redirects an attempt followed to the response it returns, in place of any an
    /// attempt noted before (written once, when it has its response: an attempt sent beside it
    /// and starting meanwhile cannot wipe out part of the chain).
    func answered(throughRedirects chain: [HTTPResponse]) {
        self.write { $0.redirects = chain }
    }

    /// A redirect as ``redirects`` keeps it: its status and the fields that say how long it may
    /// be reused.
    static func reuseFields(of redirect: HTTPResponse) -> HTTPResponse {
        var kept = HTTPResponse(status: redirect.status)
        for name in [HTTPField.Name.cacheControl, .expires, .date, .age] {
            if let value = redirect.headerFields[name] { kept.headerFields[name] = value }
        }
        return kept
    }

    /// Numbers the attempt starting now; the redirects an earlier attempt followed are
    /// forgotten (the cache judges the response by the chain that brought it).
    func setAttempt(_ attempt: Int) {
        self.write { fields in
            fields.attempt = attempt
            if !fields.redirects.isEmpty { fields.redirects.removeAll() }
        }
    }

    /// The records of a download's rounds as one request's: the latest round's, with the
    /// attempts and the time queued of every round added up.
    static func summary(of rounds: [ExchangeRecord]) -> ExchangeRecord {
        guard let last = rounds.last else { return ExchangeRecord() }
        guard rounds.count > 1 else { return last }
        let summary = ExchangeRecord()
        var fields = last.read { $0 }
        fields.attempt = rounds.reduce(0) { $0 + $1.attempt }
        fields.queued = rounds.reduce(.zero) { $0 + $1.queued }
        summary.write { $0 = fields }
        return summary
    }

    /// The scheduler slot the exchange holds now: set by the schedule stage once it has one,
    /// moved by the redirect stage when a hop goes to another host; `nil` while it holds none (a
    /// wait for another host's slot that failed, or one under way).
    var slot: SlotHold? {
        self.lock.lock()
        defer { self.lock.unlock() }
        return self.heldSlot
    }

    /// Counts an attempt into the redirect stage, and says whether it takes its first host's slot
    /// back: when a redirect has moved the slot, or an earlier attempt's wait for another host's
    /// slot failed and left none, and no other attempt is under way, it is a request sent again
    /// from the top (a retry, a middleware's). One sent beside another that is still under way
    /// (hedging) shares the slot where that one has it.
    func attemptStarts() -> Bool {
        self.lock.lock()
        defer { self.lock.unlock() }
        self.attemptsUnderWay += 1
        return self.attemptsUnderWay == 1 && (self.heldSlot?.moved == true || (self.heldSlot == nil && self.lostSlot != nil))
    }

    /// Notes that a wait for `slot` failed, so the exchange holds no slot now.
    func loseSlot(_ slot: SlotHold) {
        self.lock.lock()
        defer { self.lock.unlock() }
        if self.heldSlot == nil { self.lostSlot = slot }
    }

    /// The slot whose wait failed, taken once (by the attempt that then takes a slot again).
    func takeLostSlot() -> SlotHold? {
        self.lock.lock()
        defer { self.lock.unlock() }
        guard self.heldSlot == nil, let lost = self.lostSlot else { return nil }
        self.lostSlot = nil
        return lost
    }

    /// Counts an attempt out of the redirect stage (``attemptStarts()``).
    func attemptEnded() {
        self.lock.lock()
        defer { self.lock.unlock() }
        self.attemptsUnderWay -= 1
    }

    func holdSlot(_ slot: SlotHold) {
        self.lock.lock()
        defer { self.lock.unlock() }
        self.heldSlot = slot
        self.lostSlot = nil
    }

    /// Takes the slot away if it is still the one held at `host` (`nil` when another hop took it
    /// first: two attempts sent at once by a middleware never both give one slot back).
    func takeSlot(heldAt host: String) -> SlotHold? {
        self.lock.lock()
        defer { self.lock.unlock() }
        guard let slot = self.heldSlot, slot.host == host else { return nil }
        self.heldSlot = nil
        return slot
    }
}
