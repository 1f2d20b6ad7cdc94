import Foundation
import HTTPTypes

/// Stages 15 and 16: the client's middleware in order, then the endpoint's — authentication,
/// prerequisites, signing, your own. They run after queueing, just before the request leaves, so
/// a token or a signature is never stale, and they see the request as boxed for the wire (the
/// bytes that are sent). Responses come back through them in reverse order.
///
/// An error a middleware throws surfaces as itself: a ``CourierError`` keeps its kind; any other
/// error becomes kind `middleware` with the error as ``CourierError/underlying``; either way its
/// ``ErrorContext/stage`` names the middleware's type.
struct MiddlewareStage: PipelineStage {
    enum Scope: String, Sendable {
        case client
        case endpoint
    }

    let scope: Scope
    let clientMiddleware: [any Middleware]
    let events: EventHub
    var name: String { "\(self.scope.rawValue)-middleware" }
    var isLinked: Bool { self.scope == .endpoint || !self.clientMiddleware.isEmpty }

    @inline(__always)
    func run<Next: PipelineNext>(_ exchange: RequestExchange, next: Next) async throws -> Outcome {
        if self.chainIsEmpty(exchange) { return try await next(exchange) }
        return try await self.intercepted(exchange, next: next)
    }

    @inline(never)
    private func chainIsEmpty(_ exchange: RequestExchange) -> Bool {
        self.scope == .client ? self.clientMiddleware.isEmpty : exchange.endpoint.middleware.isEmpty
    }

    /// The exchange sent through the middleware of this stage's scope.
    @inline(never)
    private func intercepted<Next: PipelineNext>(_ exchange: RequestExchange, next: Next) async throws -> Outcome {
        let chain = self.scope == .client ? self.clientMiddleware : exchange.endpoint.middleware
        let last = Self.last(exchange, next: next)
        guard self.events.isActive else {
            return Outcome(response: try await MiddlewareChain.send(exchange.request, through: chain, exchange: exchange, last: last))
        }
        return try await self.interceptedObserved(exchange, chain: chain, last: last)
    }

    /// What the last middleware calls: the rest of the pipeline (made apart, so the exchange
    /// it captures is not also held by the async frame).
    @inline(never)
    private static func last<Next: PipelineNext>(_ exchange: RequestExchange, next: Next) -> Middleware.Next {
        { request in
            var inner = exchange
            inner.request = request
            return try await next.outOfLine(inner).response
        }
    }

    /// ``intercepted(_:next:)`` with a monitor listening: middleware (an authenticator) reports
    /// its own events through the task-local scope.
    @inline(never)
    private func interceptedObserved(
        _ exchange: RequestExchange, chain: [any Middleware], last: @escaping Middleware.Next
    ) async throws -> Outcome {
        let scope = MonitorScope(events: self.events, request: exchange.request)
        return Outcome(
            response: try await MonitorScope.$current.withValue(scope) {
                try await MiddlewareChain.send(exchange.request, through: chain, exchange: exchange, last: last)
            })
    }
}

/// Runs a request through a list of middleware.
enum MiddlewareChain {
    static func send(
        _ request: Request, through chain: [any Middleware], exchange: RequestExchange, last: @escaping Middleware.Next
    ) async throws -> RawResponse {
        var next = last
        for middleware in chain.reversed() {
            let inner = next
            next = { request in
                do {
                    return try await middleware.intercept(request, next: inner)
                } catch {
                    throw ErrorContext.attach(
                        error, stage: String(describing: type(of: middleware)), exchange: exchange, fromMiddleware: true)
                }
            }
        }
        return try await next(request)
    }
}

/// Middleware that must see every request that goes on the wire: it runs in its place in the
/// chain, and again on each retry attempt and on each redirect hop to the same origin, just
/// before the transport. ``RequestSigner`` is one, so a retried or redirected request carries a
/// fresh signature over what is actually sent.
public protocol PerHopMiddleware: Middleware {}

extension RequestSigner: PerHopMiddleware {}

/// Stage 17: a failed attempt is sent again under the endpoint's ``RetryPolicy`` (or the
/// client's): the decision is ``RetryPolicy/decide(_:)``, a pure function; a ``RetryBudget``
/// keeps retries to a share of requests. The backoff wait is cancellable and never passes the
/// deadline. Each retry is logged with its attempt number, and per-hop middleware (signing)
/// runs again for it.
struct RetryStage: PipelineStage {
    let defaultPolicy: RetryPolicy
    let budget: RetryBudget
    let events: EventHub
    let clientMiddleware: [any Middleware]
    var name: String { "retry" }

    @inline(__always)
    func run<Next: PipelineNext>(_ exchange: RequestExchange, next: Next) async throws -> Outcome {
        // An exchange arrives as attempt 1 (only this stage numbers attempts, on its own copies);
        // then the first attempt needs no copy of it, and its frame stays small.
        guard exchange.request.attempt == 1 else { return try await self.renumbered(exchange, next: next) }
        self.budget.recordRequest()
        exchange.record.setAttempt(1)
        let outcome: Outcome
        do {
            outcome = try await next(exchange)
        } catch {
            return try await self.retrying(exchange, afterError: error, next: next)
        }
        if self.mayRetry(exchange, status: outcome.response.statusCode) {
            return try await self.retrying(exchange, afterResponse: outcome, next: next)
        }
        return outcome
    }

    /// ``retrying(_:after:next:)`` after a first attempt that failed.
    @inline(never)
    private func retrying<Next: PipelineNext>(_ exchange: RequestExchange, afterError error: any Error, next: Next) async throws -> Outcome
    {
        try await self.retrying(exchange, after: .failure(error), next: next)
    }

    /// ``retrying(_:after:next:)`` after a first attempt answered with a status the policy retries.
    @inline(never)
    private func retrying<Next: PipelineNext>(
        _ exchange: RequestExchange, afterResponse outcome: Outcome, next: Next
    ) async throws -> Outcome {
        try await self.retrying(exchange, after: .success(outcome), next: next)
    }

    /// The exchange as attempt 1, through `run`.
    @inline(never)
    private func renumbered<Next: PipelineNext>(_ exchange: RequestExchange, next: Next) async throws -> Outcome {
        var first = exchange
        first.request.attempt = 1
        return try await self.run(first, next: next)
    }

    /// Whether the policy may send the request again after a response with `status`.
    @inline(never)
    private func mayRetry(_ exchange: RequestExchange, status: Int) -> Bool {
        let policy = exchange.endpoint.retryPolicy ?? self.defaultPolicy
        return policy.maxAttempts > 1 && policy.retryableStatuses.contains(status)
    }

    /// The attempts after the first, while the policy and the budget allow. Apart from `run` so
    /// that the first attempt's async frame stays small (the common case never retries).
    @inline(never)
    private func retrying<Next: PipelineNext>(
        _ exchange: RequestExchange, after first: Result<Outcome, any Error>, next: Next
    ) async throws -> Outcome {
        let policy = exchange.endpoint.retryPolicy ?? self.defaultPolicy
        guard policy.maxAttempts > 1, !Task.isCancelled else { return try first.get() }
        var current = exchange
        var number = 1
        var result = first
        while true {
            let facts = RetryPolicy.Attempt(
                number: number, method: current.request.head.method,
                hasIdempotencyKey: current.request.head.headerFields[Self.idempotencyKey] != nil,
                bodyCanBeResent: current.request.body.map { $0.isReplayable || !$0.hasBeenSent } ?? true,
                result: Self.classify(result), timeLeft: current.timeLeft, now: Date(), jitter: Double.random(in: 0..<1)
            )
            guard case .retry(let delay) = policy.decide(facts), self.budget.tryRetry() else { return try result.get() }
            if case .success(let outcome) = result {
                await outcome.response.body.discard()
            }
            if self.events.isActive {
                let reason = Self.reason(result)
                self.events.emit(current.request) { $0.retrying($1, attempt: number + 1, after: delay, reason: reason) }
            }
            do {
                try await Task.sleep(for: delay)
            } catch {
                throw CourierError.cancelled(underlying: error)
            }
            number += 1
            current.request.attempt = number
            exchange.record.setAttempt(number)
            do {
                let perHop = (self.clientMiddleware + exchange.endpoint.middleware).filter { $0 is any PerHopMiddleware }
                let attempt = current
                let response = try await MiddlewareChain.send(current.request, through: perHop, exchange: current) { request in
                    var inner = attempt
                    inner.request = request
                    return try await next.outOfLine(inner).response
                }
                result = .success(Outcome(response: response))
            } catch {
                result = .failure(error)
            }
            guard policy.maxAttempts > number, !Task.isCancelled else { return try result.get() }
            if case .success(let outcome) = result, !policy.retryableStatuses.contains(outcome.response.statusCode) {
                return outcome
            }
        }
    }

    static let idempotencyKey = HTTPField.Name("Idempotency-Key")!

    static func classify(_ result: Result<Outcome, any Error>) -> RetryPolicy.AttemptResult {
        switch result {
        case .success(let outcome):
            return .status(outcome.response.statusCode, retryAfter: outcome.response.head.headerFields[.retryAfter])
        case .failure(let error):
            guard let failure = error as? CourierError, failure.kind == .transport, failure.context?.stage == "transport" else {
                return .other
            }
            return failure.wasNotProcessed ? .notProcessed : .connectionFailed
        }
    }

    static func reason(_ result: Result<Outcome, any Error>) -> String {
        switch result {
        case .success(let outcome): return "status \(outcome.response.statusCode)"
        case .failure(let error): return CourierError.wrap(error).shortDescription
        }
    }
}

/// Stage 18: redirects are followed here, for every transport alike, under the client's
/// ``RedirectPolicy``: at most `maxRedirects`, loops detected, 303 (and 301/302 after a non-GET)
/// become GET, https → http refused, `Authorization`, `Cookie`, `Proxy-Authorization` and the
/// signature fields dropped when the origin changes. A hop to the same origin as the request
/// passes the per-hop middleware again (it is signed again); a hop to another origin does not.
/// A one-shot body is never resent: a 307/308 for one is handed back as it is.
struct RedirectStage: PipelineStage {
    let policy: RedirectPolicy
    let clientMiddleware: [any Middleware]
    let events: EventHub
    var name: String { "redirect" }

    /// Whether a status is a redirect this stage follows: 301, 302, 303, 307, 308 (a switch, not
    /// a set: it is asked of every response).
    static func isRedirect(_ status: Int) -> Bool {
        switch status {
        case 301, 302, 303, 307, 308: true
        default: false
        }
    }

    @inline(__always)
    func run<Next: PipelineNext>(_ exchange: RequestExchange, next: Next) async throws -> Outcome {
        // The first hop (hop 0, as the exchange arrives) in a small frame; a redirect is followed
        // apart, in a frame of its own that only requests with a redirect allocate.
        let response = try await next(exchange).response
        if self.policy.maxRedirects > 0, Self.isRedirect(response.statusCode) {
            return try await self.follow(exchange, from: response, next: next)
        }
        return Outcome(response: response)
    }

    /// Follows the redirect `first` answered with, hop by hop, while the policy allows.
    @inline(never)
    private func follow<Next: PipelineNext>(_ exchange: RequestExchange, from first: RawResponse, next: Next) async throws -> Outcome {
        var request = exchange.request
        var visited: Set<String> = []
        var hops = 0
        var response = first
        while true {
            if hops > 0 {
                var hopExchange = exchange
                hopExchange.request = request
                hopExchange.hop = hops
                let hop = hopExchange
                // URLs are parsed only once a redirect happens: most requests have none.
                if let origin = exchange.request.url, let url = request.url, Self.sameOrigin(origin, url) {
                    let perHop = (self.clientMiddleware + exchange.endpoint.middleware).filter { $0 is any PerHopMiddleware }
                    response = try await MiddlewareChain.send(request, through: perHop, exchange: hop) { request in
                        var inner = hop
                        inner.request = request
                        return try await next.outOfLine(inner).response
                    }
                } else {
                    response = try await next.outOfLine(hop).response
                }
            }
            guard self.policy.maxRedirects > 0,
                Self.isRedirect(response.statusCode),
                let location = response.head.headerFields[.location],
                let current = request.url
            else {
                if hops > 0, response.url == nil { response.url = request.url }
                return Outcome(response: response)
            }
            if hops == 0 { visited.insert("\(request.head.method.rawValue) \(current.absoluteString)") }

            guard let target = URL(string: location, relativeTo: current)?.absoluteURL,
                let scheme = target.scheme?.lowercased(), scheme == "http" || scheme == "https"
            else {
                await response.body.discard()
                throw CourierError(.redirect, "the redirect target '\(location)' is not an http(s) URL")
            }
            if hops >= self.policy.maxRedirects {
                await response.body.discard()
                throw CourierError(.redirect, "stopped after \(self.policy.maxRedirects) redirects")
            }
            if current.scheme?.lowercased() == "https", scheme == "http", !self.policy.allowsInsecureDowngrade {
                await response.body.discard()
                throw CourierError(.redirect, "refused a redirect from https to http (\(Redactor.standard.redact(url: target)))")
            }
            var following = request
            let status = response.statusCode
            if status == 303 || ((status == 301 || status == 302) && request.head.method != .get && request.head.method != .head) {
                if request.head.method != .head { following.head.method = .get }
                following.body = nil
                // RFC 9110 §15.4: the request that no longer has content loses the fields that
                // described it (a compressed POST's Content-Encoding included).
                for name in Self.contentFields { following.head.headerFields[name] = nil }
            } else if let body = request.body, !body.isReplayable {
                // 307/308 must resend the body; a one-shot body cannot be, so hand back the 3xx.
                if response.url == nil { response.url = current }
                return Outcome(response: response)
            }
            if !Self.sameOrigin(current, target) {
                for name in self.policy.sensitiveFields { following.head.headerFields[name] = nil }
            }
            following.head.scheme = scheme
            following.head.authority = Self.authority(of: target)
            following.head.path = Self.pathAndQuery(of: target)
            let key = "\(following.head.method.rawValue) \(target.absoluteString)"
            if visited.contains(key) {
                await response.body.discard()
                throw CourierError(.redirect, "redirect loop detected at \(Redactor.standard.redact(url: target))")
            }
            visited.insert(key)
            await response.body.discard()
            if self.events.isActive {
                let location = Redactor.standard.redact(url: target)
                self.events.emit(exchange.request) { $0.redirected($1, status: status, location: location) }
            }
            hops += 1
            request = following
        }
    }

    /// The fields that describe a request's content (RFC 9110 §15.4).
    static let contentFields: [HTTPField.Name] = [
        .contentType, .contentLength, .contentEncoding, .contentLanguage, .contentLocation, .lastModified,
        HTTPField.Name("Digest")!, HTTPField.Name("Content-Digest")!, HTTPField.Name("Repr-Digest")!,
    ]

    /// `host[:port]` of a URL, an IPv6 literal in brackets (RFC 3986 §3.2.2: `URL.host` gives
    /// it without them, and `::1:8080` is no authority).
    static func authority(of url: URL) -> String? {
        guard var host = url.host else { return nil }
        if host.utf8.contains(UInt8(ascii: ":")), !host.hasPrefix("[") { host = "[\(host)]" }
        return url.port.map { "\(host):\($0)" } ?? host
    }

    static func sameOrigin(_ a: URL, _ b: URL) -> Bool {
        a.scheme?.lowercased() == b.scheme?.lowercased()
            && a.host?.lowercased() == b.host?.lowercased()
            && effectivePort(a) == effectivePort(b)
    }

    static func effectivePort(_ url: URL) -> Int? {
        url.port ?? (url.scheme?.lowercased() == "https" ? 443 : url.scheme?.lowercased() == "http" ? 80 : nil)
    }

    static func pathAndQuery(of url: URL) -> String {
        guard let components = URLComponents(url: url, resolvingAgainstBaseURL: true) else { return "/" }
        var path = components.percentEncodedPath
        if path.isEmpty { path = "/" }
        if let query = components.percentEncodedQuery { path += "?\(query)" }
        return path
    }
}

/// Stage 20: the transport sends the request and returns when the response head has arrived;
/// the body streams. Fails with `transport`, `tls`, `pinMismatch`, `timeout` or `cancelled`.
struct TransportStage: PipelineStage {
    let transport: any Transport
    let events: EventHub
    var name: String { "transport" }

    @inline(__always)
    func run<Next: PipelineNext>(_ exchange: RequestExchange, next: Next) async throws -> Outcome {
        guard self.events.isActive else {
            exchange.record.sent(exchange.request)
            var response = try await self.transport.send(exchange.request)
            exchange.record.received(status: response.statusCode, version: response.version)
            if Self.hasNoContent(response, to: exchange.request) { response.body = response.body.withoutAnnouncedLength }
            return Outcome(response: response)
        }
        return try await self.sendObserved(exchange)
    }

    /// Whether the response has no content whatever its `Content-Length` says (RFC 9112 §6.3):
    /// an answer to HEAD, or a 1xx, 204 or 304.
    @inline(__always)
    static func hasNoContent(_ response: RawResponse, to request: Request) -> Bool {
        let status = response.statusCode
        return response.body.expectedLength != nil && (status < 200 || status == 204 || status == 304 || request.head.method == .head)
    }

    /// The exchange sent with the monitors told of the attempt, its failure or its response
    /// (apart from `run`, so that exchanges without monitors allocate a small frame).
    @inline(never)
    private func sendObserved(_ exchange: RequestExchange) async throws -> Outcome {
        var request = exchange.request
        let started = AttemptEvent(request: request, attempt: request.attempt, hop: exchange.hop)
        self.events.emit { $0.attemptStarted(started) }
        for monitor in self.events.monitors {
            for field in monitor.fieldsToSend(with: started) { request.head.headerFields[field.name] = field.value }
        }
        let attempt = AttemptEvent(request: request, attempt: request.attempt, hop: exchange.hop)
        exchange.record.sent(request, observed: true)
        var response: RawResponse
        do {
            response = try await self.transport.send(request)
        } catch {
            let failure = CourierError.wrap(error)
            self.events.emit { $0.attemptFailed(attempt, error: failure) }
            throw error
        }
        exchange.record.received(status: response.statusCode, version: response.version, observed: true)
        self.events.emit { $0.responseReceived(attempt, response: response.head, version: response.version) }
        if Self.hasNoContent(response, to: request) { response.body = response.body.withoutAnnouncedLength }
        return Outcome(response: response)
    }
}
