import Foundation
import HTTPTypes

/// Something that watches a client's requests go through the pipeline: one method per event.
///
/// Install monitors with ``Client/Configuration/eventMonitors``; several may be installed, and
/// each sees every event in the order it happens. Logging (``LogMonitor``), metrics, tracing,
/// HAR capture and fixture recording are all monitors. Every method has an empty default, so a
/// monitor implements only the events it needs.
///
/// Methods are called synchronously by the task doing the work: they must return quickly and
/// never block (hand slow work to your own actor or queue). A client with no monitor and no
/// logger builds no event at all.
///
/// Events of one request share its ``RequestEvent/id``. A request that joins an identical one in
/// flight (deduplication) gets ``deduplicationJoined(_:sharing:)`` with the id of the request
/// that went on the wire; the attempt events that follow carry that id, not the joiner's.
public protocol EventMonitor: Sendable {
    /// A caller's request entered the pipeline (built, before the cache and the queue).
    func requestStarted(_ request: RequestEvent)
    /// The request waits for a slot: the scheduler's total or per-host limit is reached.
    func requestQueued(_ request: RequestEvent, host: String)
    /// The request left the queue, because it got a slot or because it was cancelled.
    func requestDequeued(_ request: RequestEvent, host: String)
    /// The request holds one of the scheduler's slots for `host` (it is in flight).
    func slotAcquired(_ request: RequestEvent, host: String)
    /// The request gave its slot back: its body has ended, or it failed.
    func slotReleased(_ request: RequestEvent, host: String)
    /// The cache answered without the network (`source` is ``ResponseSource/cache`` or ``ResponseSource/stale``).
    func cacheHit(_ request: RequestEvent, source: ResponseSource, age: TimeInterval)
    /// A stored response was confirmed by the server (`304`) and answers the request.
    func cacheRevalidated(_ request: RequestEvent)
    /// The response was stored in the cache.
    func cacheStored(_ request: RequestEvent)
    /// The request joined an identical one in flight (`sharing` is that request's id) and gets its answer.
    func deduplicationJoined(_ request: RequestEvent, sharing: RequestID)
    /// One request is handed to the transport: each retry and each redirect hop is an attempt.
    func attemptStarted(_ attempt: AttemptEvent)
    /// Header fields this monitor adds to the attempt (trace context propagation); asked right
    /// after ``attemptStarted(_:)``. The default adds none. A field the caller set is sent as the
    /// caller set it, and with the caller's `traceparent` no monitor's `tracestate` is added.
    func fieldsToSend(with attempt: AttemptEvent) -> HTTPFields
    /// The response head of an attempt arrived (its body may still be arriving).
    func responseReceived(_ attempt: AttemptEvent, response: HTTPResponse, version: HTTPVersion)
    /// An attempt failed before a response head arrived.
    func attemptFailed(_ attempt: AttemptEvent, error: CourierError)
    /// A redirect is followed: `status` from the hop before, `location` redacted.
    func redirected(_ request: RequestEvent, status: Int, location: String)
    /// A failed attempt will be sent again as attempt `attempt` after `delay`.
    func retrying(_ request: RequestEvent, attempt: Int, after delay: Duration, reason: String)
    /// An authenticator refreshed its credential while handling this request.
    func authRefreshed(_ request: RequestEvent)
    /// The payload was decoded into the endpoint's value type.
    func decoded(_ request: RequestEvent, as type: String)
    /// The request succeeded (for a stream, when the head arrived; for a download, when the file is in place).
    func requestFinished(_ request: RequestEvent, result: RequestResult)
    /// The request failed with `error` (never kind `cancelled`, see ``requestCancelled(_:error:result:)``).
    func requestFailed(_ request: RequestEvent, error: CourierError, result: RequestResult)
    /// The request was cancelled by its caller (or its task).
    func requestCancelled(_ request: RequestEvent, error: CourierError, result: RequestResult)
}

extension EventMonitor {
    public func requestStarted(_ request: RequestEvent) {}
    public func requestQueued(_ request: RequestEvent, host: String) {}
    public func requestDequeued(_ request: RequestEvent, host: String) {}
    public func slotAcquired(_ request: RequestEvent, host: String) {}
    public func slotReleased(_ request: RequestEvent, host: String) {}
    public func cacheHit(_ request: RequestEvent, source: ResponseSource, age: TimeInterval) {}
    public func cacheRevalidated(_ request: RequestEvent) {}
    public func cacheStored(_ request: RequestEvent) {}
    public func deduplicationJoined(_ request: RequestEvent, sharing: RequestID) {}
    public func attemptStarted(_ attempt: AttemptEvent) {}
    public func fieldsToSend(with attempt: AttemptEvent) -> HTTPFields { [:] }
    public func responseReceived(_ attempt: AttemptEvent, response: HTTPResponse, version: HTTPVersion) {}
    public func attemptFailed(_ attempt: AttemptEvent, error: CourierError) {}
    public func redirected(_ request: RequestEvent, status: Int, location: String) {}
    public func retrying(_ request: RequestEvent, attempt: Int, after delay: Duration, reason: String) {}
    public func authRefreshed(_ request: RequestEvent) {}
    public func decoded(_ request: RequestEvent, as type: String) {}
    public func requestFinished(_ request: RequestEvent, result: RequestResult) {}
    public func requestFailed(_ request: RequestEvent, error: CourierError, result: RequestResult) {}
    public func requestCancelled(_ request: RequestEvent, error: CourierError, result: RequestResult) {}
}

/// A request as an ``EventMonitor`` sees it: the logical request and when the event happened.
public struct RequestEvent: Sendable {
    /// The logical request: built from the endpoint, before wire boxing, authentication and signing.
    public let request: Request
    /// When the event happened.
    public let instant: ContinuousClock.Instant
    /// When the event happened, by the wall clock.
    public let date: Date

    /// Creates an event for a request, now.
    public init(request: Request) {
        self.request = request
        self.instant = .now
        self.date = Date()
    }

    /// The request's id, shared by all its events and log lines.
    public var id: RequestID { self.request.id }
    /// The endpoint's name.
    public var name: String { self.request.name }
    /// The method.
    public var method: HTTPRequest.Method { self.request.head.method }
    /// The host and port the request goes to.
    public var host: String { self.request.head.authority ?? "" }
}

/// One request handed to the transport, as an ``EventMonitor`` sees it.
public struct AttemptEvent: Sendable {
    /// The request as it goes on the wire: boxed, authenticated, signed, with its cookies. Its
    /// ``Request/id`` is the caller's (for a shared request, the one that went on the wire).
    public let request: Request
    /// 1 for the first attempt, 2, 3, … for retries.
    public let attempt: Int
    /// 0 for the request, 1, 2, … for the redirect hops that follow it.
    public let hop: Int
    /// When the attempt started.
    public let instant: ContinuousClock.Instant
    /// When the attempt started, by the wall clock.
    public let date: Date

    /// Tells this attempt apart from every other of the process, two sent at once for one
    /// request (a hedging middleware) included: the events of one attempt carry the same.
    package let serial: UInt64

    /// The last serial given.
    private static let serials = Locked<UInt64>(0)

    /// Creates an attempt event, now.
    public init(request: Request, attempt: Int, hop: Int) {
        self.request = request
        self.attempt = attempt
        self.hop = hop
        self.instant = .now
        self.date = Date()
        self.serial = Self.serials.withLock { serial in
            serial &+= 1
            return serial
        }
    }

    /// The event of `started`'s attempt with the request as it went on the wire (the fields
    /// monitors added to it).
    init(sending request: Request, of started: AttemptEvent) {
        self.request = request
        self.attempt = started.attempt
        self.hop = started.hop
        self.instant = started.instant
        self.date = started.date
        self.serial = started.serial
    }

    /// The request's id.
    public var id: RequestID { self.request.id }
}

/// What a request came to, as an ``EventMonitor`` sees it at its end.
public struct RequestResult: Sendable {
    /// The response head, when one arrived (a status error has one; a transport failure does not).
    public var response: HTTPResponse?
    /// The body in memory (after content decoding), when it was collected; `nil` for streams,
    /// downloads and failures before the body.
    public var body: Data?
    /// The number of body bytes the caller got (for a download, the bytes written by this request).
    public var bodySize: Int
    /// The HTTP version the response came over; `nil` for answers from the cache.
    public var version: HTTPVersion?
    /// Where the answer came from.
    public var source: ResponseSource
    /// The age of a stored response, in seconds.
    public var age: TimeInterval?
    /// Why a stored response past its freshness answered (``source`` is ``ResponseSource/stale``).
    public var staleReason: StaleReason? = nil
    /// From the start of the request to this event.
    public var duration: Duration
    /// The header fields of the last request that went on the wire (as sent: with authentication
    /// and cookies), `nil` when nothing was sent for this caller (a cache hit, a joiner).
    public var sentFields: HTTPFields?
    /// The body of the last request that went on the wire, when it was in memory.
    public var sentBody: Data?
    /// The final URL (after redirects), as text.
    public var url: String
    /// How many attempts were made.
    public var attempts: Int
    /// How long the request waited for a scheduler slot (zero when it did not wait).
    public var queued: Duration
    /// From handing the last attempt to the transport to its response head.
    public var wait: Duration?
    /// How the body reached the caller.
    public var delivery: Delivery

    /// How the body reached the caller.
    public enum Delivery: Sendable, Equatable {
        /// Read into memory (``RequestResult/body``).
        case collected
        /// Handed to the caller as a stream; the body was still arriving at this event.
        case streaming
        /// Written to a file; `resumedAt` is the offset a resumed download started from.
        case downloaded(resumedAt: Int64)
    }
}
