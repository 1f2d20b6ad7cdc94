import Courier
import Foundation
import HTTPTypes
import Tracing

/// An event monitor that traces a client's requests through swift-distributed-tracing.
///
/// Each caller's request is one span (named after the endpoint), a child of the caller's
/// task-local span (`InstrumentationContext.current`); each attempt on the wire (every retry and
/// redirect hop) is a child span of kind `client` named after the method, whose context the tracer
/// injects into the outgoing request's header fields (W3C `traceparent` with an OpenTelemetry
/// tracer). Attributes follow the OpenTelemetry HTTP client conventions: `http.request.method`,
/// `server.address`, `server.port`, `url.full` (secrets redacted), `http.request.resend_count`,
/// `http.response.status_code`, `error.type`.
///
/// A request that joins an identical one in flight (deduplication) has no attempt of its own:
/// its span is linked to the attempt spans of the request that went on the wire, whichever
/// started first.
///
/// An attempt span ends when its response head arrives (or the attempt fails); the request's
/// span when the caller gets its value or error.
public final class TracingMonitor: EventMonitor, Sendable {
    /// What is open for one request id: one table entry, so each event costs one lookup.
    private struct Entry {
        var request: (any Span)?
        /// The open attempt spans, by the attempt's serial: two at once when a middleware sends
        /// the request twice (hedging).
        var attempts: [UInt64: any Span] = [:]
        /// The attempt spans of a request that went on the wire, for joiners to link to.
        var network: [InstrumentationContext] = []
        /// The spans of the requests that joined this one.
        var joiners: [any Span] = []
        /// How many attempts have started: every one after the first is a resend (a retry, a
        /// redirect hop, a middleware's own resend after a 401).
        var started = 0
    }

    private struct State {
        var entries: [RequestID: Entry] = [:]
    }

    private let tracer: any Tracer
    private let redactor: Redactor
    private let state = Locked(State())

    /// Creates a monitor that starts spans with `tracer` (the bootstrapped one by default).
    ///
    /// `redactor` hides secrets in the URLs the spans carry (`url.full`); it is not the client's
    /// unless you pass the client's (as when you added names to it).
    public init(tracer: any Tracer = InstrumentationSystem.tracer, redactor: Redactor = .standard) {
        self.tracer = tracer
        self.redactor = redactor
    }

    public func requestStarted(_ request: RequestEvent) {
        // OpenTelemetry's HTTP client spans are named by the method when no low-cardinality
        // name is known: an endpoint without a name of its own has only its path (ids) for one.
        let named = request.request.hasOwnName
        let span = self.tracer.startSpan(
            named ? request.name : request.method.rawValue, context: InstrumentationContext.current ?? .topLevel, ofKind: .client)
        self.describe(span, request.request)
        if span.isRecording {
            if named { span.attributes["courier.endpoint"] = request.name }
            span.attributes["courier.request_id"] = request.id.description
        }
        self.state.withLock { $0.entries[request.id, default: Entry()].request = span }
    }

    public func attemptStarted(_ attempt: AttemptEvent) {
        let (parent, resends) = self.state.withLock { state -> (InstrumentationContext?, Int) in
            state.entries[attempt.id, default: Entry()].started += 1
            return (state.entries[attempt.id]?.request?.context, (state.entries[attempt.id]?.started ?? 1) - 1)
        }
        let span = self.tracer.startSpan(
            attempt.request.head.method.rawValue, context: parent ?? InstrumentationContext.current ?? .topLevel, ofKind: .client
        )
        let recording = span.isRecording
        self.describe(span, attempt.request)
        // OpenTelemetry's HTTP client conventions count every resend, redirects and resends for
        // authorization included; the attempt number and the hop restart at each other's change.
        if recording, resends > 0 { span.attributes["http.request.resend_count"] = resends }
        let joiners = self.state.withLock { state -> [any Span] in
            state.entries[attempt.id, default: Entry()].attempts[attempt.serial] = span
            // Joiners link to recorded spans only: a link to a span that is not kept leads nowhere.
            guard recording else { return [] }
            state.entries[attempt.id, default: Entry()].network.append(span.context)
            return state.entries[attempt.id]?.joiners ?? []
        }
        for joiner in joiners { joiner.addLink(SpanLink(context: span.context, attributes: [:])) }
    }

    public func fieldsToSend(with attempt: AttemptEvent) -> HTTPFields {
        // A span that is not recorded still propagates its context (a sampled-out trace stays
        // sampled out downstream); a no-op tracer injects nothing.
        guard let span = self.state.withLock({ $0.entries[attempt.id]?.attempts[attempt.serial] }) else { return [:] }
        var fields = HTTPFields()
        self.tracer.inject(span.context, into: &fields, using: HTTPFieldsInjector())
        return fields
    }

    public func responseReceived(_ attempt: AttemptEvent, response: HTTPResponse, version: HTTPVersion) {
        guard let span = self.takeAttempt(attempt) else { return }
        guard span.isRecording else { return span.end() }
        span.attributes["http.response.status_code"] = response.status.code
        if response.status.code >= 400 {
            span.attributes["error.type"] = String(response.status.code)
            span.setStatus(SpanStatus(code: .error))
        }
        span.end()
    }

    public func attemptFailed(_ attempt: AttemptEvent, error: CourierError) {
        guard let span = self.takeAttempt(attempt) else { return }
        guard span.isRecording else { return span.end() }
        span.attributes["error.type"] = MetricsMonitor.outcome(of: error)
        span.recordError(error)
        span.setStatus(SpanStatus(code: .error))
        span.end()
    }

    public func deduplicationJoined(_ request: RequestEvent, sharing: RequestID) {
        let (span, network) = self.state.withLock { state -> ((any Span)?, [InstrumentationContext]) in
            guard let span = state.entries[request.id]?.request else { return (nil, []) }
            // Kept for the shared request's later attempts only while it is known (not made anew
            // for one that ended: nothing would remove it).
            state.entries[sharing]?.joiners.append(span)
            return (span, state.entries[sharing]?.network ?? [])
        }
        guard let span, span.isRecording else { return }
        span.attributes["courier.deduplicated"] = true
        for context in network { span.addLink(SpanLink(context: context, attributes: [:])) }
    }

    public func retrying(_ request: RequestEvent, attempt: Int, after delay: Duration, reason: String) {
        guard let span = self.state.withLock({ $0.entries[request.id]?.request }), span.isRecording else { return }
        var attributes = SpanAttributes()
        attributes["courier.attempt"] = attempt
        attributes["courier.reason"] = reason
        span.addEvent(SpanEvent(name: "retry", attributes: attributes))
    }

    public func requestFinished(_ request: RequestEvent, result: RequestResult) {
        guard let span = self.ended(request.id) else { return }
        guard span.isRecording else { return span.end() }
        if let status = result.response?.status.code { span.attributes["http.response.status_code"] = status }
        span.attributes["courier.source"] = result.source.rawValue
        span.end()
    }

    public func requestFailed(_ request: RequestEvent, error: CourierError, result: RequestResult) {
        self.fail(request, error: error)
    }

    public func requestCancelled(_ request: RequestEvent, error: CourierError, result: RequestResult) {
        self.fail(request, error: error)
    }

    private func fail(_ request: RequestEvent, error: CourierError) {
        guard let span = self.ended(request.id) else { return }
        guard span.isRecording else { return span.end() }
        if let status = error.status?.code { span.attributes["http.response.status_code"] = status }
        span.attributes["error.type"] = error.kind == .httpStatus ? String(error.status?.code ?? 0) : MetricsMonitor.outcome(of: error)
        span.recordError(error)
        span.setStatus(SpanStatus(code: .error))
        span.end()
    }

    /// The open attempt span of `id`, now closed; the request's entry goes with it once the
    /// request itself has ended (its caller left while a shared attempt went on, or the attempt
    /// was a background revalidation after its caller's end).
    private func takeAttempt(_ attempt: AttemptEvent) -> (any Span)? {
        let id = attempt.id
        return self.state.withLock { state in
            guard let span = state.entries[id]?.attempts.removeValue(forKey: attempt.serial) else { return nil }
            if let entry = state.entries[id], entry.request == nil, entry.attempts.isEmpty { state.entries[id] = nil }
            return span
        }
    }

    /// The span of a request that ended; its entry goes, unless an attempt of it is still open
    /// (a shared request whose first caller left): that attempt's end removes it.
    private func ended(_ id: RequestID) -> (any Span)? {
        self.state.withLock { state in
            guard let entry = state.entries[id] else { return nil }
            if !entry.attempts.isEmpty {
                state.entries[id]?.request = nil
            } else {
                state.entries[id] = nil
            }
            return entry.request
        }
    }

    /// How many requests the monitor keeps something of (for tests).
    package var entryCount: Int { self.state.withLock { $0.entries.count } }

    private func describe(_ span: any Span, _ request: Request) {
        guard span.isRecording else { return }
        span.attributes["http.request.method"] = request.head.method.rawValue
        if let authority = Authority(scheme: request.head.scheme, authority: request.head.authority) {
            span.attributes["server.address"] = authority.host
            if let port = authority.port { span.attributes["server.port"] = port }
        }
        span.attributes["url.full"] = self.redactor.redact(urlString: request.urlString)
    }
}

/// Writes a tracer's propagation fields into HTTP header fields.
struct HTTPFieldsInjector: Injector {
    func inject(_ value: String, forKey key: String, into carrier: inout HTTPFields) {
        guard let name = HTTPField.Name(key) else { return }
        carrier[name] = value
    }
}
