import Foundation
import HTTPTypes

/// One API call, described as a value: where it goes, what it sends and how its answer is decoded.
///
/// Group endpoints by business area as static factories, so each endpoint owns its configuration
/// without a class per API:
///
/// ```swift
/// enum NewsAPI {
///     static func list(page: Int) -> Endpoint<NewsPage> {
///         Endpoint(name: "news.list", path: "/news", query: ["page": "\(page)"])
///     }
///     static func like(_ id: Int) -> Endpoint<Void> {
///         Endpoint(name: "news.like", method: .post, path: "/news/\(id)/like", decoding: .none)
///     }
/// }
/// let page = try await client.send(NewsAPI.list(page: 2))
/// ```
public struct Endpoint<Response>: Sendable {
    /// The name used in logs and metrics, such as `news.list`; without one, `METHOD path` (the
    /// path without its query, an absolute URL's password hidden), and metrics and traces label
    /// the request by its method only (a path can hold ids: no label of unbounded cardinality).
    public var name: String {
        didSet { self.hasOwnName = true }
    }
    /// Whether ``name`` was given (to `init`, or set since).
    package private(set) var hasOwnName: Bool
    /// The HTTP method.
    public var method: HTTPRequest.Method
    /// The path, relative to the client's base URL, or an absolute URL.
    public var path: String
    /// Query items appended to the URL, in order.
    public var query: [URLQueryItem]
    /// Header fields added to the client's default headers (and replacing ones with the same name).
    public var headers: HTTPFields
    /// The body to send.
    public var body: EndpointBody?
    /// How the response body becomes a `Response`.
    public var decoding: ResponseDecoding<Response>
    /// The statuses that count as success; others throw ``CourierError`` of kind `httpStatus`.
    public var acceptedStatuses: Range<Int>
    /// How long the exchange may take; `nil` uses the client's default.
    public var timeout: Duration?
    /// Middleware that runs for this endpoint only, after the client's middleware.
    public var middleware: [any Middleware]
    /// How urgently the scheduler starts the request.
    public var priority: RequestPriority = .normal
    /// Whether identical in-flight requests share one network request.
    public var deduplication: Deduplication = .automatic
    /// Whether the request body is sent compressed with gzip (`Content-Encoding: gzip`); only for
    /// servers known to accept it.
    public var compressesRequestBody: Bool = false
    /// How the response cache is used; `nil` uses the client's default policy.
    public var cachePolicy: CachePolicy?
    /// How failed attempts are retried; `nil` uses the client's ``Client/Configuration/retry``.
    public var retryPolicy: RetryPolicy?
    /// Whether the request only prefetches (deferred or refused in constrained mode).
    public var isPrefetch: Bool = false
    /// The service whose base URL the path is resolved against (through the client's
    /// ``ServerDirectory``); `nil` uses the client's base URL.
    public var service: ServiceID?
    /// The wire protocol; `nil` uses the service's default, then the client's.
    public var wire: (any WireProtocol)?
    /// The operation's name for the wire protocol (the JSON-RPC method); `nil` uses ``name``.
    public var operation: String?
    /// Whether no response payload is expected (a JSON-RPC notification).
    public var isNotification: Bool = false
    /// Header fields given as text, checked when the request is built: a name or value with CR,
    /// LF or NUL makes the request fail with `invalidRequest` before anything is sent.
    public var rawHeaders: [(name: String, value: String)] = []
    /// Whether a redirect to another origin is refused instead of followed: for a request whose
    /// body is a secret for its own origin only (an OAuth2 grant, RFC 6749 §10.4), which a
    /// `307` or `308` would send on as it is.
    var staysOnOrigin = false

    /// Creates an endpoint with an explicit decoding.
    public init(
        name: String? = nil,
        method: HTTPRequest.Method = .get,
        path: String,
        query: [URLQueryItem] = [],
        headers: HTTPFields = [:],
        body: EndpointBody? = nil,
        acceptedStatuses: Range<Int> = 200..<300,
        timeout: Duration? = nil,
        middleware: [any Middleware] = [],
        decoding: ResponseDecoding<Response>
    ) {
        self.name = name ?? EndpointNaming.defaultName(method: method, path: path)
        self.hasOwnName = name != nil
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
        self.decoding = decoding
        self.acceptedStatuses = acceptedStatuses
        self.timeout = timeout
        self.middleware = middleware
    }

    /// Creates an endpoint with query items given as a dictionary (sorted by name for stable URLs).
    public init(
        name: String? = nil,
        method: HTTPRequest.Method = .get,
        path: String,
        query: [String: String],
        headers: HTTPFields = [:],
        body: EndpointBody? = nil,
        acceptedStatuses: Range<Int> = 200..<300,
        timeout: Duration? = nil,
        middleware: [any Middleware] = [],
        decoding: ResponseDecoding<Response>
    ) {
        self.init(
            name: name, method: method, path: path,
            query: query.sorted { $0.key < $1.key }.map { URLQueryItem(name: $0.key, value: $0.value) },
            headers: headers, body: body, acceptedStatuses: acceptedStatuses, timeout: timeout,
            middleware: middleware, decoding: decoding
        )
    }
}

extension Endpoint where Response: Decodable & SendableMetatype {
    /// Creates an endpoint whose response is JSON decoded with the client's decoder.
    public init(
        name: String? = nil,
        method: HTTPRequest.Method = .get,
        path: String,
        query: [URLQueryItem] = [],
        headers: HTTPFields = [:],
        body: EndpointBody? = nil,
        acceptedStatuses: Range<Int> = 200..<300,
        timeout: Duration? = nil,
        middleware: [any Middleware] = []
    ) {
        self.init(
            name: name, method: method, path: path, query: query, headers: headers, body: body,
            acceptedStatuses: acceptedStatuses, timeout: timeout, middleware: middleware, decoding: .json()
        )
    }

    /// Creates an endpoint whose response is JSON, with query items given as a dictionary.
    public init(
        name: String? = nil,
        method: HTTPRequest.Method = .get,
        path: String,
        query: [String: String],
        headers: HTTPFields = [:],
        body: EndpointBody? = nil,
        acceptedStatuses: Range<Int> = 200..<300,
        timeout: Duration? = nil,
        middleware: [any Middleware] = []
    ) {
        self.init(
            name: name, method: method, path: path, query: query, headers: headers, body: body,
            acceptedStatuses: acceptedStatuses, timeout: timeout, middleware: middleware, decoding: .json()
        )
    }
}

extension Endpoint {
    /// A copy with another priority.
    public func priority(_ priority: RequestPriority) -> Endpoint {
        var copy = self
        copy.priority = priority
        return copy
    }

    /// A copy with another deduplication setting.
    public func deduplication(_ deduplication: Deduplication) -> Endpoint {
        var copy = self
        copy.deduplication = deduplication
        return copy
    }

    /// A copy with a header field given as text (validated when the request is built).
    public func header(_ name: String, _ value: String) -> Endpoint {
        var copy = self
        copy.rawHeaders.append((name, value))
        return copy
    }

    /// A copy sent to another service.
    public func service(_ service: ServiceID) -> Endpoint {
        var copy = self
        copy.service = service
        return copy
    }

    /// A copy with another wire protocol.
    public func wire(_ wire: any WireProtocol) -> Endpoint {
        var copy = self
        copy.wire = wire
        return copy
    }

    /// A copy with its own retry policy.
    public func retry(_ policy: RetryPolicy) -> Endpoint {
        var copy = self
        copy.retryPolicy = policy
        return copy
    }

    /// A copy marked as a prefetch: deferred or refused while the client is constrained.
    public func prefetch(_ isPrefetch: Bool = true) -> Endpoint {
        var copy = self
        copy.isPrefetch = isPrefetch
        return copy
    }
}

extension Endpoint where Response: Decodable & SendableMetatype {
    /// A JSON-RPC 2.0 call: `params` (an object or an array) are sent to `method` on `service`.
    public static func rpc<Params: Encodable & Sendable>(_ method: String, params: Params, service: ServiceID? = nil) -> Endpoint {
        var endpoint = Endpoint(name: method, method: .post, path: "", body: .json(params))
        endpoint.service = service
        endpoint.wire = JSONRPCProtocol()
        endpoint.operation = method
        return endpoint
    }

    /// A JSON-RPC 2.0 call without params.
    public static func rpc(_ method: String, service: ServiceID? = nil) -> Endpoint {
        var endpoint = Endpoint(name: method, method: .post, path: "")
        endpoint.service = service
        endpoint.wire = JSONRPCProtocol()
        endpoint.operation = method
        return endpoint
    }
}

extension Endpoint where Response == Void {
    /// A JSON-RPC 2.0 notification: no id, and no result expected.
    public static func rpcNotification<Params: Encodable & Sendable>(
        _ method: String, params: Params, service: ServiceID? = nil
    ) -> Endpoint {
        var endpoint = Endpoint(name: method, method: .post, path: "", body: .json(params), decoding: .none)
        endpoint.service = service
        endpoint.wire = JSONRPCProtocol()
        endpoint.operation = method
        endpoint.isNotification = true
        return endpoint
    }
}

/// The body an endpoint sends, encoded when the request is built.
public struct EndpointBody: Sendable {
    enum Storage: Sendable {
        case json(@Sendable (JSONEncoder) throws -> Data)
        case form([URLQueryItem])
        case raw(RequestBody)
    }

    let storage: Storage

    /// A JSON body encoded from any `Encodable` value, with the client's encoder.
    public static func json<Value: Encodable & Sendable>(_ value: Value) -> EndpointBody {
        EndpointBody(storage: .json({ encoder in try encoder.encode(value) }))
    }

    /// A JSON body encoded with a specific encoder.
    public static func json<Value: Encodable & Sendable>(_ value: Value, encoder: JSONEncoder) -> EndpointBody {
        EndpointBody(storage: .json({ _ in try encoder.encode(value) }))
    }

    /// An `application/x-www-form-urlencoded` body.
    public static func form(_ fields: [URLQueryItem]) -> EndpointBody {
        EndpointBody(storage: .form(fields))
    }

    /// An `application/x-www-form-urlencoded` body from a dictionary (fields sorted by name).
    public static func form(_ fields: [String: String]) -> EndpointBody {
        .form(fields.sorted { $0.key < $1.key }.map { URLQueryItem(name: $0.key, value: $0.value) })
    }

    /// Raw bytes with a content type.
    public static func data(_ data: Data, contentType: String) -> EndpointBody {
        EndpointBody(storage: .raw(.data(data, contentType: contentType)))
    }

    /// Any request body, streamed or in memory.
    public static func body(_ body: RequestBody) -> EndpointBody {
        EndpointBody(storage: .raw(body))
    }

    /// The content type the body will have once encoded, known without encoding it.
    var declaredContentType: String? {
        switch self.storage {
        case .json: return "application/json"
        case .form: return "application/x-www-form-urlencoded"
        case .raw(let body): return body.contentType
        }
    }

    /// Encodes the body into a ``RequestBody``.
    func encoded(with encoder: JSONEncoder) throws -> RequestBody {
        switch self.storage {
        case .json(let encode):
            do {
                return .data(try encode(encoder), contentType: "application/json")
            } catch {
                throw CourierError(.invalidRequest, "could not encode the JSON body: \(error)", underlying: error)
            }
        case .form(let fields):
            return .data(Data(FormEncoding.encode(fields).utf8), contentType: "application/x-www-form-urlencoded")
        case .raw(let body):
            return body
        }
    }
}

/// `application/x-www-form-urlencoded` encoding (WHATWG URL standard): ASCII letters, digits
/// and `*-._` are kept, a space becomes `+`, every other UTF-8 byte is percent-encoded.
enum FormEncoding {
    @inline(__always)
    static func isKept(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
            UInt8(ascii: "*"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"):
            return true
        default:
            return false
        }
    }

    static func escape(_ text: String) -> String {
        PercentEncoding.escape(text, spaceAsPlus: true, keeping: Self.isKept)
    }

    static func encode(_ fields: [URLQueryItem]) -> String {
        fields.map { "\(escape($0.name))=\(escape($0.value ?? ""))" }.joined(separator: "&")
    }
}

/// The name of an endpoint that was given none.
package enum EndpointNaming {
    /// `METHOD path`: the path without its query or fragment (where secrets and ids travel), an
    /// absolute URL's user and password hidden, on one line (a value interpolated into the path
    /// may hold a line break, which the wire target encodes but a log line would not).
    package static func defaultName(method: HTTPRequest.Method, path: String) -> String {
        CourierError.oneLine(Self.shown(method: method, path: path))
    }

    private static func shown(method: HTTPRequest.Method, path: String) -> String {
        var shown = Substring(path)
        if let cut = shown.utf8.firstIndex(where: { $0 == UInt8(ascii: "?") || $0 == UInt8(ascii: "#") }) { shown = shown[..<cut] }
        if shown.utf8.contains(UInt8(ascii: "@")), let url = URL(string: String(shown)), url.user != nil || url.password != nil,
            var components = URLComponents(url: url, resolvingAgainstBaseURL: false)
        {
            components.user = nil
            components.password = nil
            return "\(method.rawValue) \(components.string ?? "")"
        }
        // A URL the parser refuses (a space, `|` or `{` in it, on a platform whose parser does not
        // encode them) may hold user info too: hidden as the redactor hides it in text.
        return "\(method.rawValue) \(Redactor.withoutUserInfo(String(shown), Redactor.standard.replacement))"
    }
}
