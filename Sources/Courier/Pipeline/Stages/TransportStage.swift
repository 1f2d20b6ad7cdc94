import Foundation
import HTTPTypes

/// The transport sends the request and returns when the response head has arrived;
/// the body streams. Fails with `transport`, `tls`, `pinMismatch`, `timeout` or `cancelled`.
struct TransportStage: PipelineStage {
    let transport: any Transport
    let events: EventHub
    var name: String { "transport" }
    private static let traceparent = HTTPField.Name("traceparent")!
    private static let tracestate = HTTPField.Name("tracestate")!

    @inline(__always)
    func run<Next: PipelineNext>(_ exchange: RequestExchange, next: Next) async throws -> Outcome {
        guard self.events.isActive else {
            exchange.record.sent(exchange.request)
            var response: RawResponse
            do {
                response = try await self.transport.send(exchange.request)
            } catch {
                throw Self.marked(error)
            }
            if response.statusCode < 200 { throw Self.interim(response) }
            exchange.record.received(status: response.statusCode, version: response.version)
            if Self.hasNoContent(response, to: exchange.request) { response.body = response.body.withoutAnnouncedLength }
            return Outcome(response: response)
        }
        return try await self.sendObserved(exchange)
    }

    /// What the transport threw, as a ``CourierError`` marked as the transport's
    /// (``CourierError/isFromTransport``).
    @inline(never)
    static func marked(_ error: any Error) -> CourierError {
        var failure = CourierError.wrap(error)
        failure.isFromTransport = true
        return failure
    }

    /// A final answer with an interim status (1xx), such as a 101 (Switching Protocols) that no
    /// request of Courier's asks for (RFC 9110 §7.8, §15.2): no answer to read, kind `transport`,
    /// on every transport alike. Its body is cancelled, which closes the connection.
    @inline(never)
    static func interim(_ response: RawResponse) -> CourierError {
        response.body.cancel()
        var failure = CourierError.transport("the server's final answer has the interim status \(response.statusCode)")
        failure.isFromTransport = true
        return failure
    }

    /// Whether the response has no content whatever its `Content-Length` says (RFC 9112 §6.3):
    /// an answer to HEAD, or a 204 or 304 (a 1xx never gets this far).
    @inline(__always)
    static func hasNoContent(_ response: RawResponse, to request: Request) -> Bool {
        let status = response.statusCode
        return response.body.expectedLength != nil && (status == 204 || status == 304 || request.head.method == .head)
    }

    /// The exchange sent with the monitors told of the attempt, its failure or its response
    /// (apart from `run`, so that exchanges without monitors allocate a small frame).
    @inline(never)
    private func sendObserved(_ exchange: RequestExchange) async throws -> Outcome {
        var request = exchange.request
        let started = AttemptEvent(request: request, attempt: request.attempt, hop: exchange.hop)
        self.events.emit { $0.attemptStarted(started) }
        // A field the caller set (forwarding its own trace context) is the caller's, and a
        // `tracestate` goes only with its own `traceparent` (W3C Trace Context §3): with the
        // caller's `traceparent`, no monitor's `tracestate` is added either. Judged against the
        // request as the caller made it, so one monitor's fields do not stop another's.
        let callers = request.head.headerFields
        let callerHasTraceContext = callers[Self.traceparent] != nil
        for monitor in self.events.monitors {
            for field in monitor.fieldsToSend(with: started)
            where callers[field.name] == nil && !(callerHasTraceContext && field.name == Self.tracestate) {
                request.head.headerFields[field.name] = field.value
            }
        }
        let attempt = AttemptEvent(sending: request, of: started)
        exchange.record.sent(request, observed: true)
        var response: RawResponse
        do {
            response = try await self.transport.send(request)
        } catch {
            let failure = Self.marked(error)
            self.events.emit { $0.attemptFailed(attempt, error: failure) }
            throw failure
        }
        if response.statusCode < 200 {
            let failure = Self.interim(response)
            self.events.emit { $0.attemptFailed(attempt, error: failure) }
            throw failure
        }
        exchange.record.received(status: response.statusCode, version: response.version, observed: true)
        self.events.emit { $0.responseReceived(attempt, response: response.head, version: response.version) }
        if Self.hasNoContent(response, to: request) { response.body = response.body.withoutAnnouncedLength }
        return Outcome(response: response)
    }
}
