import Courier
import CoreMetrics
import Foundation
import HTTPTypes

/// An event monitor that reports a client's requests through swift-metrics.
///
/// No backend is bundled: bootstrap one (Prometheus, StatsD, OpenTelemetry…) with
/// `MetricsSystem.bootstrap(_:)`, or pass a factory. Labels and dimensions follow the
/// swift-server convention (snake case); no dimension carries a URL, a query or an id, so the
/// number of series stays bounded by your endpoints, hosts and outcomes:
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
/// by class), or the ``CourierError/Kind`` of any other failure (`timeout`, `transport`,
/// `cancelled`, `decoding`, …). `source` is `network`, `cache`, `revalidated`, `stale` or
/// `coalesced` (shared by deduplication). `endpoint` is the endpoint's name: give endpoints names
/// that do not embed ids.
public final class MetricsMonitor: EventMonitor, Sendable {
    /// A label and its dimensions as one string (cheaper to build and hash than arrays).
    private typealias Key = String

    private static func key(_ label: String, _ dimensions: [(String, String)]) -> Key {
        var key = label
        for (name, value) in dimensions {
            key.append("\u{1}")
            key.append(name)
            key.append("\u{2}")
            key.append(value)
        }
        return key
    }

    private struct Handlers {
        var counters: [Key: any CounterHandler] = [:]
        var timers: [Key: any TimerHandler] = [:]
        var meters: [Key: any MeterHandler] = [:]
    }

    private let factory: any MetricsFactory
    /// Handlers made once per label and dimensions, as long-lived metrics are.
    private let handlers = Locked(Handlers())

    /// Creates a monitor reporting to `factory` (the bootstrapped one by default).
    public init(factory: any MetricsFactory = MetricsSystem.factory) {
        self.factory = factory
    }

    public func requestQueued(_ request: RequestEvent, host: String) {
        self.meter("courier_requests_queued", [("host", host)]).increment(by: 1)
    }

    public func requestDequeued(_ request: RequestEvent, host: String) {
        self.meter("courier_requests_queued", [("host", host)]).decrement(by: 1)
    }

    public func slotAcquired(_ request: RequestEvent, host: String) {
        self.meter("courier_requests_in_flight", [("host", host)]).increment(by: 1)
    }

    public func slotReleased(_ request: RequestEvent, host: String) {
        self.meter("courier_requests_in_flight", [("host", host)]).decrement(by: 1)
    }

    public func retrying(_ request: RequestEvent, attempt: Int, after delay: Duration, reason: String) {
        self.counter("courier_retries_total", [("endpoint", request.name)]).increment(by: 1)
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
        return Self.snakeCase(error.kind.rawValue)
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
        let method = request.method.rawValue
        let source = result.source.rawValue
        self.counter("courier_requests_total", [("endpoint", request.name), ("method", method), ("outcome", outcome), ("source", source)]).increment(by: 1)
        self.timer("courier_request_duration", [("endpoint", request.name), ("method", method), ("outcome", outcome)])
            .recordNanoseconds(Self.nanoseconds(result.duration))
        if let sent = result.sentBody, !sent.isEmpty {
            self.counter("courier_request_body_bytes", [("endpoint", request.name)]).increment(by: Int64(sent.count))
        }
        if result.bodySize > 0 {
            self.counter("courier_response_body_bytes", [("endpoint", request.name), ("source", source)]).increment(by: Int64(result.bodySize))
        }
    }

    private func counter(_ label: String, _ dimensions: [(String, String)]) -> any CounterHandler {
        self.handler(\.counters, label, dimensions) { self.factory.makeCounter(label: label, dimensions: dimensions) }
    }

    private func timer(_ label: String, _ dimensions: [(String, String)]) -> any TimerHandler {
        self.handler(\.timers, label, dimensions) { self.factory.makeTimer(label: label, dimensions: dimensions) }
    }

    private func meter(_ label: String, _ dimensions: [(String, String)]) -> any MeterHandler {
        self.handler(\.meters, label, dimensions) { self.factory.makeMeter(label: label, dimensions: dimensions) }
    }

    /// The handler for a label and dimensions, made by `make` the first time.
    private func handler<Handler>(
        _ table: WritableKeyPath<Handlers, [Key: Handler]>, _ label: String, _ dimensions: [(String, String)], make: () -> Handler
    ) -> Handler {
        let key = Self.key(label, dimensions)
        if let handler = self.handlers.withLock({ $0[keyPath: table][key] }) { return handler }
        let made = make()
        return self.handlers.withLock { handlers in
            if let existing = handlers[keyPath: table][key] { return existing }
            handlers[keyPath: table][key] = made
            return made
        }
    }

    static func nanoseconds(_ duration: Duration) -> Int64 {
        let (seconds, attoseconds) = duration.components
        return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }
}
