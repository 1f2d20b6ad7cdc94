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
/// 2. the client's middleware, then the endpoint's, run in order;
/// 3. redirects are followed under the ``RedirectPolicy``;
/// 4. the transport sends it — `transport`, `timeout`, `tls` or `cancelled` errors;
/// 5. the status is checked against the endpoint's accepted statuses — `httpStatus`;
/// 6. the body is read up to the size limit — `responseTooLarge`;
/// 7. the body is decoded — `decoding`.
public final class Client: Sendable {
    /// The configuration the client was created with.
    public let configuration: Configuration
    private let log: RequestLog
    private let base: BaseURL?
    private let follower: RedirectFollower

    /// Creates a client.
    public init(configuration: Configuration) {
        self.configuration = configuration
        self.log = RequestLog(logger: configuration.logger, redactor: configuration.redactor)
        self.base = configuration.baseURL.flatMap(BaseURL.init)
        self.follower = RedirectFollower(policy: configuration.redirects, transport: configuration.transport)
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
        let clock = ContinuousClock()
        let start = clock.now
        let request: Request
        do {
            request = try self.makeRequest(for: endpoint)
        } catch {
            throw CourierError.wrap(error)
        }
        self.log.started(request)
        var progress = Progress()
        do {
            let response = try await self.exchange(request, endpoint: endpoint, progress: &progress, start: start, clock: clock)
            self.log.finished(request, status: response.status.code, duration: response.duration, bytes: response.byteCount, version: response.version, outcome: "success")
            return response
        } catch {
            var failure = CourierError.wrap(error)
            if Task.isCancelled, failure.kind == .transport {
                failure = .cancelled(underlying: failure)
            }
            let seen = progress
            self.log.finished(request, status: seen.status, duration: clock.now - start, bytes: seen.bytes, version: seen.version, outcome: "failure(\(failure.shortDescription))")
            throw failure
        }
    }

    /// What a request had received when it ended, for its log line.
    private struct Progress {
        var status: Int?
        var version: HTTPVersion?
        var bytes = 0
    }

    private func exchange<Value: Sendable>(
        _ request: Request,
        endpoint: Endpoint<Value>,
        progress: inout Progress,
        start: ContinuousClock.Instant,
        clock: ContinuousClock
    ) async throws -> Response<Value> {
        let raw = try await self.execute(request, middleware: endpoint.middleware)
        progress.status = raw.status.code
        progress.version = raw.version
        guard endpoint.acceptedStatuses.contains(raw.status.code) else {
            let body = try? await raw.body.collect(upTo: self.configuration.maxResponseSize, deadline: request.deadline)
            progress.bytes = body?.count ?? 0
            throw CourierError.httpStatus(raw.head, body: body)
        }
        let body: Data
        if endpoint.decoding.readsBody {
            body = try await raw.body.collect(upTo: self.configuration.maxResponseSize, deadline: request.deadline)
        } else {
            body = Data()
            await raw.body.discard()
        }
        progress.bytes = body.count
        let value = try endpoint.decoding.run(.init(body: body, head: raw.head, decoder: self.configuration.decoder))
        return Response(
            value: value, status: raw.status, headers: raw.head.headerFields, version: raw.version,
            duration: clock.now - start, urlString: raw.url?.absoluteString ?? request.urlString, byteCount: body.count
        )
    }

    /// Starts the endpoint's request in a new task and returns a handle to await or cancel it.
    public func start<Value: Sendable>(_ endpoint: Endpoint<Value>) -> RequestHandle<Value> {
        RequestHandle(task: Task { () async throws -> Response<Value> in
            try await self.response(endpoint)
        })
    }

    /// Sends a prepared request through the middleware chain and the transport, without decoding.
    ///
    /// The body of the returned response is still streaming; read it or discard it.
    public func execute(_ request: Request, middleware endpointMiddleware: [any Middleware] = []) async throws -> RawResponse {
        let follower = self.follower
        var next: Middleware.Next = { request in try await follower.send(request) }
        for middleware in (self.configuration.middleware + endpointMiddleware).reversed() {
            let inner = next
            next = { request in try await middleware.intercept(request, next: inner) }
        }
        return try await next(request)
    }

    /// Builds the request an endpoint describes, without sending it.
    public func makeRequest<Value>(for endpoint: Endpoint<Value>) throws -> Request {
        var head: HTTPRequest
        if endpoint.path.hasPrefix("https://") || endpoint.path.hasPrefix("http://") {
            guard let url = URL(string: endpoint.path), let target = BaseURL(url) else {
                throw CourierError.invalidRequest("'\(endpoint.path)' is not a valid absolute URL")
            }
            head = HTTPRequest(method: endpoint.method, scheme: target.scheme, authority: target.authority, path: target.path(appending: "", query: endpoint.query))
        } else {
            guard let base = self.base else {
                throw CourierError.invalidRequest("the endpoint path '\(endpoint.path)' is relative and the client has no base URL")
            }
            head = HTTPRequest(method: endpoint.method, scheme: base.scheme, authority: base.authority, path: base.path(appending: endpoint.path, query: endpoint.query))
        }
        var fields = self.configuration.defaultHeaders
        for field in endpoint.headers {
            fields[field.name] = nil
        }
        fields.append(contentsOf: endpoint.headers)
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
        if self.basePath.contains("?") || relative.isEmpty {
            path = self.basePath.isEmpty ? "/" : self.basePath
        } else {
            path = self.basePath + (relative.hasPrefix("/") ? relative : "/" + relative)
        }
        if !query.isEmpty {
            path += path.contains("?") ? "&" : "?"
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
