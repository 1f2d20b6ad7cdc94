import CoreMetrics
import Courier
import Foundation
import HTTPTypes

/// An event monitor that reports a client's requests through swift-metrics.
///
/// No backend is bundled: bootstrap one (Prometheus, StatsD, OpenTelemetry…) with
/// `MetricsSystem.bootstrap(_:)`, or pass a factory. Labels and dimensions follow the
/// swift-server convention (snake case); no dimension carries a URL, a query or an id, so the
/// number of series stays bounded by your endpoints, hosts and outcomes (an endpoint without a
/// name of its own counts as `unnamed`: its default name holds its path):
///
/// | metric | type | dimensions | what |
/// |---|---|---|---|
/// | `courier_requests_total` | counter | `endpoint`, `method`, `outcome`, `source` | requests ended |
/// | `courier_request_duration` | timer | `endpoint`, `method`, `outcome` | from start to end, nanoseconds |
/// | `courier_request_body_bytes` | counter | `endpoint` | request body bytes sent (last attempt) |
/// | `courier_response_body_bytes` | counter | `endpoint`, `source` | response body bytes received |
/// | `courier_retries_total` | counter | `endpoint` | attempts sent again by the retry stage |
/// | `courier_requests_queued` | meter | `host` | requests waiting for a scheduler slot |
/// | `courier_requests_in_flight` | meter | `host` | requests holding a slot |
///
/// `outcome` is `success`, `http_4xx` / `http_5xx` (a status the endpoint does not accept,
/// by class), or the `CourierError/Kind` of any other failure (`timeout`, `transport`,
/// `cancelled`, `decoding`, …). `source` is `network`, `cache`, `revalidated`, `stale` or
/// `coalesced` (shared by deduplication). `endpoint` is the endpoint's name: give endpoints names
/// that do not embed ids. `host` is the host a request's slot is for, which a redirect can set:
/// the first ``maxHosts`` hosts seen get series of their own, any later one counts as `other`
/// (a server that redirects each response to a new host cannot grow the series without bound).
public final class MetricsMonitor: EventMonitor, Sendable {
    /// The handlers a request's end updates, made once per endpoint, method, outcome and source.
    private struct Ending: Hashable, Sendable {
        var endpoint: String
        var method: String
        var outcome: String
        var source: String
    }

    private struct EndingHandlers {
        let requests: any CounterHandler
        let duration: any TimerHandler
        let sentBytes: any CounterHandler
        let receivedBytes: any CounterHandler
    }

    /// The two gauges of one host.
    private struct HostMeters {
        let queued: any MeterHandler
        let inFlight: any MeterHandler
    }

    private struct Handlers {
        var endings: [Ending: EndingHandlers] = [:]
        var hosts: [String: HostMeters] = [:]
        /// The hosts with series of their own, taken when first seen (before their meters are
        /// made): every event of a host then goes to the same series.
        var ownHosts: Set<String> = []
        var retries: [String: any CounterHandler] = [:]
    }

    private let factory: any MetricsFactory
    /// Handlers made once per label and dimensions, as long-lived metrics are; looked up by the
    /// values that tell them apart, so a request costs one lookup per event, no string building.
    private let handlers = Locked(Handlers())

    /// Creates a monitor reporting to `factory` (the bootstrapped one by default).
    public init(factory: any MetricsFactory = MetricsSystem.factory) {
        self.factory = factory
    }

    public func requestQueued(_ request: RequestEvent, host: String) {
        self.meters(host).queued.increment(by: 1)
    }

    public func requestDequeued(_ request: RequestEvent, host: String) {
        self.meters(host).queued.decrement(by: 1)
    }

    public func slotAcquired(_ request: RequestEvent, host: String) {
        self.meters(host).inFlight.increment(by: 1)
    }

    /// The `endpoint` dimension: the endpoint's own name, or `unnamed` for one that has none
    /// (its default name holds the path, which can hold ids: a dimension without bound).
    static func label(_ request: RequestEvent) -> String {
        request.request.hasOwnName ? request.name : "unnamed"
    }

    public func slotReleased(_ request: RequestEvent, host: String) {
        self.meters(host).inFlight.decrement(by: 1)
    }

    public func retrying(_ request: RequestEvent, attempt: Int, after delay: Duration, reason: String) {
        let name = Self.label(request)
        if let counter = self.handlers.withLock({ $0.retries[name] }) { return counter.increment(by: 1) }
        let made = self.factory.makeCounter(label: "courier_retries_total", dimensions: [("endpoint", name)])
        let counter = self.handlers.withLock { handlers -> any CounterHandler in
            if let existing = handlers.retries[name] { return existing }
            handlers.retries[name] = made
            return made
        }
        counter.increment(by: 1)
    }

    public func requestFinished(_ request: RequestEvent, result: RequestResult) {
        self.ended(request, result: result, outcome: "success")
    }

    public func requestFailed(_ request: RequestEvent, error: CourierError, result: RequestResult) {
        self.ended(request, result: result, outcome: Self.outcome(of: error))
    }

    public func requestCancelled(_ request: RequestEvent, error: CourierError, result: RequestResult) {
        self.ended(request, result: result, outcome: Self.outcome(of: error))
    }

    /// The `outcome` dimension of a failure.
    static func outcome(of error: CourierError) -> String {
        if error.kind == .httpStatus, let status = error.status?.code { return "http_\(status / 100)xx" }
        return Self.snakeCase(error.kind.description)
    }

    static func snakeCase(_ name: String) -> String {
        var result = ""
        for character in name {
            if character.isUppercase {
                result += "_" + character.lowercased()
            } else {
                result.append(character)
            }
        }
        return result
    }

    private func ended(_ request: RequestEvent, result: RequestResult, outcome: String) {
        let handlers = self.endingHandlers(
            Ending(endpoint: Self.label(request), method: request.method.rawValue, outcome: outcome, source: result.source.rawValue))
        handlers.requests.increment(by: 1)
        handlers.duration.recordNanoseconds(Self.nanoseconds(result.duration))
        if let sent = result.sentBody, !sent.isEmpty {
            handlers.sentBytes.increment(by: Int64(sent.count))
        }
        if result.bodySize > 0 {
            handlers.receivedBytes.increment(by: Int64(result.bodySize))
        }
    }

    private func endingHandlers(_ ending: Ending) -> EndingHandlers {
        if let known = self.handlers.withLock({ $0.endings[ending] }) { return known }
        let made = EndingHandlers(
            requests: self.factory.makeCounter(
                label: "courier_requests_total",
                dimensions: [
                    ("endpoint", ending.endpoint), ("method", ending.method), ("outcome", ending.outcome), ("source", ending.source),
                ]
            ),
            duration: self.factory.makeTimer(
                label: "courier_request_duration",
                dimensions: [("endpoint", ending.endpoint), ("method", ending.method), ("outcome", ending.outcome)]
            ),
            sentBytes: self.factory.makeCounter(label: "courier_request_body_bytes", dimensions: [("endpoint", ending.endpoint)]),
            receivedBytes: self.factory.makeCounter(
                label: "courier_response_body_bytes", dimensions: [("endpoint", ending.endpoint), ("source", ending.source)])
        )
        return self.handlers.withLock { handlers in
            if let existing = handlers.endings[ending] { return existing }
            handlers.endings[ending] = made
            return made
        }
    }

    /// How many hosts get series of their own; later ones share the series of host `other`.
    public static let maxHosts = 64

    private func meters(_ host: String) -> HostMeters {
        // The table only grows: a host past the limit is `other` at every event (its increments
        // and decrements meet on one series). The meters are made outside the lock (a factory
        // may be slow, or take locks of its own), and the first made for a name is kept.
        let (known, name) = self.handlers.withLock { handlers -> (HostMeters?, String) in
            if let meters = handlers.hosts[host] { return (meters, host) }
            let own = handlers.ownHosts.contains(host) || handlers.ownHosts.count < Self.maxHosts
            if own { handlers.ownHosts.insert(host) }
            let name = own ? host : Self.otherHost
            return (handlers.hosts[name], name)
        }
        if let known { return known }
        let made = HostMeters(
            queued: self.factory.makeMeter(label: "courier_requests_queued", dimensions: [("host", name)]),
            inFlight: self.factory.makeMeter(label: "courier_requests_in_flight", dimensions: [("host", name)])
        )
        return self.handlers.withLock { handlers in
            if let existing = handlers.hosts[name] { return existing }
            handlers.hosts[name] = made
            return made
        }
    }

    /// The host dimension of every host past ``maxHosts``.
    private static let otherHost = "other"

    static func nanoseconds(_ duration: Duration) -> Int64 {
        let (seconds, attoseconds) = duration.components
        return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }
}
