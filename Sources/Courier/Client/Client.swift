import Foundation
import HTTPTypes
import Logging

/// The central object an app sends its requests through.
///
/// Create one per backend configuration and pass it to the code that needs it; there is no
/// shared instance. A client owns one transport, so connections are pooled and reused.
///
/// Each request goes through these steps:
/// 1. the endpoint becomes a ``Request`` (URL, headers, encoded body) — may fail with `invalidRequest`;
/// 2. the cache is consulted under the endpoint's ``CachePolicy`` — a stored response may answer;
///    identical requests in flight share one exchange, and the scheduler orders them;
/// 3. the client's middleware, then the endpoint's, run in order;
/// 4. redirects are followed under the ``RedirectPolicy``;
/// 5. the transport sends it — `transport`, `timeout`, `tls` or `cancelled` errors;
/// 6. the response is stored in the cache when allowed (a `304` refreshes the stored one);
/// 7. the status is checked against the endpoint's accepted statuses — `httpStatus`;
/// 8. the body is read up to the size limit — `responseTooLarge`;
/// 9. the body is decoded — `decoding`.
public final class Client: Sendable {
    /// The configuration the client was created with.
    public let configuration: Configuration
    private let log: RequestLog
    var requestLog: RequestLog { self.log }
    private let base: BaseURL?
    private let follower: RedirectFollower
    let scheduler: RequestScheduler
    let deduplicator: Deduplicator
    private let constrained = ConstrainedGate()
    private let cache: ResponseCache?
    private let decodedValues = DecodedValues()
    /// Whether endpoints without a protocol of their own (or of their service) use REST.
    private let defaultIsREST: Bool

    /// Creates a client.
    public init(configuration: Configuration) {
        self.configuration = configuration
        self.log = RequestLog(logger: configuration.logger, redactor: configuration.redactor)
        self.base = configuration.baseURL.flatMap(BaseURL.init)
        self.follower = RedirectFollower(policy: configuration.redirects, transport: configuration.transport)
        self.defaultIsREST = configuration.defaultWireProtocol is RESTProtocol
        self.cache = configuration.cache.store.map { ResponseCache(store: $0, configuration: configuration.cache) }
        let scheduler = RequestScheduler(configuration: configuration.scheduling)
        self.scheduler = scheduler
        self.deduplicator = Deduplicator { ticket, priority in scheduler.reprioritize(ticket: ticket, to: priority) }
    }

    /// Sends the endpoint's request and returns the decoded value.
    ///
    /// Cancelling the calling task cancels the request on the wire and throws kind `cancelled`.
    public func send<Value: Sendable>(_ endpoint: Endpoint<Value>) async throws -> Value {
        try await self.response(endpoint).value
    }

    /// Sends the endpoint's request and returns the decoded value with status, headers, version and timing.
    ///
    /// The timeout (the endpoint's, or the client's) sets one deadline for the exchange: the
    /// transport enforces it until the response head arrives, and body reads check it as each
    /// chunk arrives; a body that stalls completely is ended by the transport's idle read timeout.
    public func response<Value: Sendable>(_ endpoint: Endpoint<Value>) async throws -> Response<Value> {
        try await self.response(endpoint, control: nil)
    }

    /// Starts the endpoint's request in a new task and returns a handle to await, cancel or re-prioritise it.
    public func start<Value: Sendable>(_ endpoint: Endpoint<Value>, priority: RequestPriority? = nil) -> RequestHandle<Value> {
        let control = RequestControl(priority: priority ?? endpoint.priority)
        return RequestHandle(task: Task { () async throws -> Response<Value> in
            try await self.response(endpoint, control: control)
        }, control: control)
    }

    /// Whether the client is constrained (Low Data Mode): prefetch endpoints are then refused or
    /// deferred (see ``Configuration/constrainedPolicy``); other requests go through.
    public var isConstrained: Bool {
        get { self.constrained.isOn }
        set { self.constrained.set(newValue) }
    }

    /// What the scheduler is doing now: queued requests by priority, requests in flight by host.
    public var traffic: TrafficSnapshot { self.scheduler.snapshot }

    /// How many calls shared another's network request, and how many started one, since creation.
    public var deduplicationCounts: (coalesced: Int, started: Int) { self.deduplicator.counts }

    func response<Value: Sendable>(
        _ endpoint: Endpoint<Value>, control: RequestControl?, policyOverride: CachePolicy? = nil, uploadReporter: ProgressReporter? = nil
    ) async throws -> Response<Value> {
        let clock = ContinuousClock()
        let start = clock.now
        var prepared: Prepared
        do {
            prepared = try self.prepare(endpoint)
            if let uploadReporter, let body = prepared.request.body {
                prepared.request.body = body.reporting(to: uploadReporter)
            }
        } catch {
            throw self.classified(CourierError.wrap(error))
        }
        var request = prepared.request
        self.log.started(request)
        var progress = Progress()
        do {
            var cacheRun: CacheRun?
            if let cache = self.cache {
                let run = cache.begin(request, policy: policyOverride ?? endpoint.cachePolicy ?? self.configuration.cache.policy)
                if let hit = cache.served(run) {
                    return try self.deliver(endpoint, prepared: prepared, outcome: hit, start: start, progress: &progress)
                }
                if case .revalidate(let conditions) = run.action {
                    request.head.headerFields.append(contentsOf: conditions)
                }
                cacheRun = run
            }
            if endpoint.isPrefetch {
                try await self.constrained.admit(policy: self.configuration.constrainedPolicy)
            }
            let priority = control?.priority ?? endpoint.priority
            var outcome: CacheOutcome
            if let key = DeduplicationKey(request: request, setting: endpoint.deduplication, configuration: self.configuration.deduplication) {
                let scheduler = self.scheduler
                let middleware = endpoint.middleware
                let shared = request
                let (fetched, coalesced) = try await self.deduplicator.run(
                    key: key, priority: priority, control: control,
                    makeTicket: { scheduler.makeTicket() }
                ) { ticket, priority in
                    try await self.fetch(shared, middleware: middleware, readsBody: true, acceptedStatuses: nil, ticket: ticket, priority: priority, control: nil)
                }
                outcome = CacheOutcome(fetched: fetched, source: coalesced ? .coalesced : .network)
            } else {
                let storesBody = cacheRun.map { self.cache?.mayStore($0) == true } == true
                let readsBody = endpoint.decoding.readsBody || prepared.wire != nil || storesBody
                let fetched = try await self.fetch(
                    request, middleware: endpoint.middleware, readsBody: readsBody,
                    acceptedStatuses: endpoint.acceptedStatuses, ticket: self.scheduler.makeTicket(), priority: priority, control: control
                )
                outcome = CacheOutcome(fetched: fetched, source: .network)
            }
            if let cache = self.cache, let run = cacheRun {
                let source = outcome.source
                outcome = cache.finish(run, fetched: outcome.fetched)
                if outcome.source == .network { outcome.source = source }
            }
            return try self.deliver(endpoint, prepared: prepared, outcome: outcome, start: start, progress: &progress)
        } catch {
            let failure = self.classifiedError(error)
            self.log.finished(request, status: progress.status, duration: clock.now - start, bytes: progress.bytes, version: progress.version, outcome: "failure(\(failure.shortDescription))")
            throw failure
        }
    }

    /// Checks the status, unboxes the wire protocol, decodes the value and logs the end of a request.
    private func deliver<Value: Sendable>(
        _ endpoint: Endpoint<Value>, prepared: Prepared, outcome: CacheOutcome, start: ContinuousClock.Instant, progress: inout Progress
    ) throws -> Response<Value> {
        let fetched = outcome.fetched
        progress.status = fetched.head.status.code
        progress.version = fetched.version
        progress.bytes = fetched.body.count
        guard endpoint.acceptedStatuses.contains(fetched.head.status.code) else {
            throw CourierError.httpStatus(fetched.head, body: fetched.body)
        }
        var payload = fetched.body
        if let wire = prepared.wire, !prepared.call.isNotification {
            payload = try wire.unbox(fetched.body, head: fetched.head, call: prepared.call)
        }
        let input = ResponseDecoding<Value>.Input(body: payload, head: fetched.head, decoder: self.configuration.decoder)
        let value: Value
        if let key = outcome.key, prepared.wire == nil, endpoint.decoding.isDeterministic {
            value = try self.decodedValues.value(key: key, body: payload) { try endpoint.decoding.run(input) }
        } else {
            value = try endpoint.decoding.run(input)
        }
        let response = Response(
            value: value, status: fetched.head.status, headers: fetched.head.headerFields, version: fetched.version,
            duration: ContinuousClock.now - start, urlString: fetched.url?.absoluteString ?? prepared.request.urlString,
            byteCount: fetched.body.count, source: outcome.source, age: outcome.age.map { .milliseconds(Int64($0 * 1000)) }
        )
        let outcomeText: String
        switch outcome.source {
        case .network: outcomeText = "success"
        case .coalesced: outcomeText = "success(coalesced)"
        case .cache: outcomeText = "success(cache, age \(Int(outcome.age ?? 0))s)"
        case .revalidated: outcomeText = "success(revalidated)"
        }
        self.log.finished(prepared.request, status: response.status.code, duration: response.duration, bytes: response.byteCount, version: outcome.source == .cache ? nil : response.version, outcome: outcomeText)
        return response
    }

    /// Cache-then-network: the stored response, however old, then the network's.
    ///
    /// The sequence yields the cached value first (``Response/source`` `.cache`, with its
    /// ``Response/age``) when one is stored, then the fresh one (`.network`), which replaces the
    /// stored entry; only the fresh one when nothing is stored. A network failure ends the
    /// sequence with the error, after the cached value. Cancelling the iterating task cancels
    /// the request.
    public func updates<Value: Sendable>(_ endpoint: Endpoint<Value>) -> AsyncThrowingStream<Response<Value>, any Error> {
        AsyncThrowingStream { continuation in
            let task = Task {
                if let cached = self.cachedResponse(endpoint) {
                    continuation.yield(cached)
                }
                do {
                    var reload = CachePolicy(mode: .reload)
                    if (endpoint.cachePolicy ?? self.configuration.cache.policy).cachesAnyMethod { reload = reload.allowingAnyMethod() }
                    continuation.yield(try await self.response(endpoint, control: nil, policyOverride: reload))
                    continuation.finish()
                } catch {
                    continuation.finish(throwing: error)
                }
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    /// The stored response for an endpoint, however old, decoded; `nil` when none is stored or it does not decode.
    private func cachedResponse<Value: Sendable>(_ endpoint: Endpoint<Value>) -> Response<Value>? {
        guard let cache = self.cache, let prepared = try? self.prepare(endpoint),
              let hit = cache.anyStored(for: prepared.request, policy: endpoint.cachePolicy ?? self.configuration.cache.policy)
        else { return nil }
        var progress = Progress()
        self.log.started(prepared.request)
        return try? self.deliver(endpoint, prepared: prepared, outcome: hit, start: .now, progress: &progress)
    }

    /// Removes every cached response.
    public func clearCache() {
        self.cache?.store.removeEntries(in: .all)
    }

    /// Removes the cached responses of one partition (call it when that account signs out).
    public func clearCache(partition: String) {
        self.cache?.store.removeEntries(in: .partition(partition))
    }

    /// Applies the classifier's presentation and raises the error's event, if any.
    func classified(_ error: CourierError) -> CourierError {
        var error = error
        error.presentation = self.configuration.errorClassifier.classify(error)
        if let name = error.event, let onEvent = self.configuration.onEvent {
            onEvent(CourierEvent(name: name, error: error))
        }
        return error
    }

    /// What a request had received when it ended, for its log line.
    private struct Progress {
        var status: Int?
        var version: HTTPVersion?
        var bytes = 0
    }

    /// Waits for a scheduler slot, runs the middleware chain and the transport, and reads the body.
    ///
    /// - Parameter acceptedStatuses: when given and the status is accepted but `readsBody` is
    ///   false, the body is discarded; otherwise it is read (error bodies are kept for the error).
    private func fetch(
        _ request: Request,
        middleware: [any Middleware],
        readsBody: Bool,
        acceptedStatuses: Range<Int>?,
        ticket: UInt64,
        priority: RequestPriority,
        control: RequestControl?
    ) async throws -> FetchedResponse {
        if let control {
            let scheduler = self.scheduler
            control.onPriorityChange { scheduler.reprioritize(ticket: ticket, to: $0) }
        }
        let maxSize = self.configuration.maxResponseSize
        return try await self.exchange(request, middleware: middleware, ticket: ticket, priority: priority, decoding: true, maxSize: maxSize) { raw in
            let body: Data
            if !readsBody, let accepted = acceptedStatuses, accepted.contains(raw.status.code) {
                await raw.body.discard()
                body = Data()
            } else {
                body = try await raw.body.collect(upTo: maxSize, deadline: request.deadline)
            }
            return FetchedResponse(head: raw.head, body: body, version: raw.version, url: raw.url)
        }
    }

    /// Holds a scheduler slot while the request goes through the middleware and the transport and
    /// `read` takes what it needs of the response; gzip and deflate are decoded when `decoding`
    /// (within `maxSize` decoded bytes, when given).
    func exchange<Result: Sendable>(
        _ request: Request, middleware: [any Middleware], ticket: UInt64, priority: RequestPriority, decoding: Bool, maxSize: Int?,
        read: (RawResponse) async throws -> Result
    ) async throws -> Result {
        let host = request.head.authority ?? ""
        try await self.scheduler.acquire(ticket: ticket, host: host, priority: priority)
        var spokeHTTP2 = false
        defer { self.scheduler.release(host: host, spokeHTTP2: spokeHTTP2) }
        var raw = try await self.execute(request, middleware: middleware)
        spokeHTTP2 = raw.version.major >= 2
        if decoding { raw = try self.decodingContent(raw, maxSize: maxSize) }
        return try await read(raw)
    }

    /// Sends a prepared request through the middleware chain and the transport, without decoding.
    ///
    /// The body of the returned response is still streaming; read it or discard it.
    public func execute(_ request: Request, middleware endpointMiddleware: [any Middleware] = []) async throws -> RawResponse {
        let follower = self.follower
        var next: Middleware.Next = { request in try await follower.send(request) }
        let chain = endpointMiddleware.isEmpty ? self.configuration.middleware : self.configuration.middleware + endpointMiddleware
        for middleware in chain.reversed() {
            let inner = next
            next = { request in try await middleware.intercept(request, next: inner) }
        }
        return try await next(request)
    }

    /// Builds the request an endpoint describes, without sending it.
    public func makeRequest<Value>(for endpoint: Endpoint<Value>) throws -> Request {
        try self.prepare(endpoint).request
    }

    /// A request ready to send, with the wire protocol that unboxes its answer (`nil` for REST).
    struct Prepared: Sendable {
        var request: Request
        var wire: (any WireProtocol)?
        var call: WireCall
    }

    private let callIDs = Locked(0)

    func prepare<Value>(_ endpoint: Endpoint<Value>) throws -> Prepared {
        var request = try self.buildRequest(for: endpoint)
        if endpoint.wire == nil, endpoint.service == nil, self.defaultIsREST {
            return Prepared(request: request, wire: nil, call: WireCall(operation: endpoint.name, isNotification: endpoint.isNotification, id: 0))
        }
        let wire = endpoint.wire ?? endpoint.service.flatMap { self.configuration.wireProtocols[$0] } ?? self.configuration.defaultWireProtocol
        if wire is RESTProtocol {
            return Prepared(request: request, wire: nil, call: WireCall(operation: endpoint.name, isNotification: endpoint.isNotification, id: 0))
        }
        let id = self.callIDs.withLock { value -> Int in
            value += 1
            return value
        }
        let call = WireCall(operation: endpoint.operation ?? endpoint.name, isNotification: endpoint.isNotification, id: id)
        do {
            try wire.box(&request, call: call)
        } catch {
            throw CourierError.wrap(error)
        }
        return Prepared(request: request, wire: wire, call: call)
    }

    private func buildRequest<Value>(for endpoint: Endpoint<Value>) throws -> Request {
        var head: HTTPRequest
        if endpoint.path.hasPrefix("https://") || endpoint.path.hasPrefix("http://") {
            guard let url = URL(string: endpoint.path), let target = BaseURL(url) else {
                throw CourierError.invalidRequest("'\(endpoint.path)' is not a valid absolute URL")
            }
            head = HTTPRequest(method: endpoint.method, scheme: target.scheme, authority: target.authority, path: target.path(appending: "", query: endpoint.query))
        } else {
            let base: BaseURL
            if let service = endpoint.service {
                guard let servers = self.configuration.servers else {
                    throw CourierError.invalidRequest("the endpoint names the service '\(service)' but the client has no server directory")
                }
                base = try servers.base(for: service)
            } else if let clientBase = self.base {
                base = clientBase
            } else {
                throw CourierError.invalidRequest("the endpoint path '\(endpoint.path)' is relative and the client has no base URL")
            }
            head = HTTPRequest(method: endpoint.method, scheme: base.scheme, authority: base.authority, path: base.path(appending: endpoint.path, query: endpoint.query))
        }
        var fields = self.configuration.defaultHeaders
        for field in endpoint.headers {
            fields[field.name] = nil
        }
        fields.append(contentsOf: endpoint.headers)
        for (name, value) in endpoint.rawHeaders where !endpoint.rawHeaders.isEmpty {
            let forbidden: Set<Unicode.Scalar> = ["\r", "\n", "\0"]
            if name.unicodeScalars.contains(where: forbidden.contains) || value.unicodeScalars.contains(where: forbidden.contains) {
                throw CourierError.invalidRequest("the header field '\(Redactor.standard.isSecret(headerName: name) ? "REDACTED" : name.debugDescription)' contains CR, LF or NUL")
            }
            guard let fieldName = HTTPField.Name(name) else {
                throw CourierError.invalidRequest("'\(name.debugDescription)' is not a valid header field name")
            }
            fields[fieldName] = value
        }
        head.headerFields = fields
        var body: RequestBody?
        if let endpointBody = endpoint.body {
            do {
                body = try endpointBody.encoded(with: self.configuration.encoder)
            } catch {
                throw CourierError.wrap(error)
            }
            if let contentType = body?.contentType, head.headerFields[.contentType] == nil {
                head.headerFields[.contentType] = contentType
            }
            if endpoint.compressesRequestBody, let plain = body {
                do {
                    body = try plain.gzipped()
                } catch {
                    throw CourierError.wrap(error)
                }
                head.headerFields[.contentEncoding] = "gzip"
            }
        }
        if self.configuration.decompression != nil, head.headerFields[.acceptEncoding] == nil {
            head.headerFields[.acceptEncoding] = "gzip, deflate"
        }
        return Request(head: head, body: body, timeout: endpoint.timeout ?? self.configuration.timeout, name: endpoint.name)
    }
}

/// A base URL split once into the parts every request needs.
struct BaseURL: Sendable {
    let scheme: String
    let authority: String
    let basePath: String

    init?(_ url: URL) {
        guard let components = URLComponents(url: url, resolvingAgainstBaseURL: true),
              let scheme = components.scheme?.lowercased(), scheme == "http" || scheme == "https",
              let host = components.percentEncodedHost, !host.isEmpty
        else { return nil }
        self.scheme = scheme
        self.authority = components.port.map { "\(host):\($0)" } ?? host
        var path = components.percentEncodedPath
        while path.hasSuffix("/") { path.removeLast() }
        if let query = components.percentEncodedQuery, !query.isEmpty {
            self.basePath = path + "?" + query
        } else {
            self.basePath = path
        }
    }

    func path(appending relative: String, query: [URLQueryItem]) -> String {
        var path: String
        // Byte searches: `String.contains(String)` goes through NSString on Linux.
        if self.basePath.utf8.contains(UInt8(ascii: "?")) || relative.isEmpty {
            path = self.basePath.isEmpty ? "/" : self.basePath
        } else {
            path = self.basePath + (relative.hasPrefix("/") ? relative : "/" + relative)
        }
        if !query.isEmpty {
            path += path.utf8.contains(UInt8(ascii: "?")) ? "&" : "?"
            path += query.map { item in
                let name = QueryEncoding.escape(item.name)
                guard let value = item.value else { return name }
                return "\(name)=\(QueryEncoding.escape(value))"
            }.joined(separator: "&")
        }
        return path
    }
}

/// Percent-encoding of query names and values: everything but RFC 3986 unreserved characters.
enum QueryEncoding {
    static let allowed: CharacterSet = {
        var set = CharacterSet()
        set.insert(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
        return set
    }()

    static func escape(_ text: String) -> String {
        text.addingPercentEncoding(withAllowedCharacters: Self.allowed) ?? text
    }
}
