import Foundation
import HTTPTypes

/// The monitors of one client, as the stages call them.
///
/// Every call site checks ``isActive`` before it builds an event, so a client with no monitor
/// pays one branch per event point and allocates nothing.
struct EventHub: Sendable {
    let monitors: [any EventMonitor]
    let isActive: Bool

    init(_ monitors: [any EventMonitor]) {
        self.monitors = monitors
        self.isActive = !monitors.isEmpty
    }

    @inline(__always)
    func emit(_ body: (any EventMonitor) -> Void) {
        for monitor in self.monitors { body(monitor) }
    }

    /// Emits `body` with an event for `request`, built only when a monitor listens.
    @inline(__always)
    func emit(_ request: Request, _ body: (any EventMonitor, RequestEvent) -> Void) {
        guard self.isActive else { return }
        let event = RequestEvent(request: request)
        for monitor in self.monitors { body(monitor, event) }
    }

    /// The result of a request from what the pipeline knows at its end.
    static func result(
        response: HTTPResponse?, body: Data?, bodySize: Int, version: HTTPVersion?, source: ResponseSource, age: TimeInterval?,
        staleReason: StaleReason? = nil, start: ContinuousClock.Instant, url: String, record: ExchangeRecord,
        delivery: RequestResult.Delivery
    ) -> RequestResult {
        RequestResult(
            response: response, body: body, bodySize: bodySize, version: version, source: source, age: age, staleReason: staleReason,
            duration: .now - start, sentFields: record.sentHeaders, sentBody: record.sentBody, url: url,
            attempts: record.attempt, queued: record.queued, wait: record.wait, delivery: delivery
        )
    }

    /// Emits the end of a request that failed with `failure`: cancelled or failed.
    func failed(_ request: Request, failure: CourierError, start: ContinuousClock.Instant, record: ExchangeRecord) {
        guard self.isActive else { return }
        let result = Self.result(
            response: failure.status.map { HTTPResponse(status: $0, headerFields: failure.headers ?? [:]) }, body: failure.body,
            bodySize: failure.body?.count ?? 0, version: record.version, source: .network, age: nil, start: start,
            // The last hop sent (after redirects): with its status and fields, the first URL
            // would describe another exchange.
            url: record.sentURL ?? request.urlString, record: record, delivery: .collected
        )
        self.emit(request) { monitor, event in
            if failure.kind == .cancelled {
                monitor.requestCancelled(event, error: failure, result: result)
            } else {
                monitor.requestFailed(event, error: failure, result: result)
            }
        }
    }
}
