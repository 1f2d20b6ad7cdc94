import Crypto
import Foundation
import HTTPTypes

/// Stage 2: the endpoint becomes the *logical* request — URL from the base URL (or the server
/// directory's entry for the endpoint's service), the client's default header fields then the
/// endpoint's, the body encoded (and compressed when asked) — and its ``LogicalKey``.
///
/// The logical request carries no wire id, no token, no signature and no timestamp: those are
/// added further down (wire stage, middleware), so identical calls share a key. Fails with
/// `invalidRequest`.
struct BuildStage: PipelineStage {
    let parts: ClientParts
    /// Whether the client's default wire protocol is REST (asked once: a dynamic cast).
    private let defaultIsREST: Bool
    var name: String { "build" }

    init(parts: ClientParts) {
        self.parts = parts
        self.defaultIsREST = parts.configuration.defaultWireProtocol is RESTProtocol
    }

    @inline(__always)
    func run<Next: PipelineNext>(_ exchange: RequestExchange, next: Next) async throws -> Outcome {
        try await next(self.built(exchange))
    }

    /// The exchange with its logical request, key and partition (synchronous and apart from
    /// `run`: its temporaries stay on the thread's stack, out of the async frame).
    @inline(never)
    private func built(_ exchange: RequestExchange) throws -> RequestExchange {
        var exchange = exchange
        var request = try RequestBuilder.build(
            exchange.endpoint, configuration: self.parts.configuration, base: self.parts.base, id: exchange.request.id)
        if let adjust = exchange.adjust { adjust(&request) }
        if let reporter = exchange.uploadReporter, let body = request.body {
            request.body = body.reporting(to: reporter)
        }
        exchange.request = request
        let endpoint = exchange.endpoint
        // REST through and through (the common case) is known without asking the protocols.
        if endpoint.wire != nil || endpoint.service != nil || !self.defaultIsREST {
            exchange.wireIdentity = RequestBuilder.wireIdentity(of: endpoint, configuration: self.parts.configuration)
        }
        if self.parts.keepsLogicalRequests {
            exchange.request.logical = LogicalRequest(request, wire: exchange.wireIdentity)
        }
        if !exchange.mode.isStream {
            // Read once: the dedup key, the cache lookup and the cache store all use this value.
            exchange.partition = self.parts.configuration.cache.partition()
        }
        if !exchange.mode.isStream, self.parts.configuration.deduplication.isEnabled, DeduplicationStage.shares(exchange) {
            exchange.key = LogicalKey(
                request: request, endpoint: exchange.endpoint, partition: exchange.partition, wire: exchange.wireIdentity,
                ignoredHeaders: self.parts.configuration.deduplication.ignoredHeaders
            )
        }
        return exchange
    }
}

/// Builds logical requests from endpoints.
enum RequestBuilder {
    /// What the wire stage will do with the endpoint's requests, as text: `""` for REST, else the
    /// protocol, the operation and whether it is a notification. Part of the cache and dedup keys,
    /// so two operations with the same params never share an answer.
    static func wireIdentity(of endpoint: EndpointDescription, configuration: Client.Configuration) -> String {
        if endpoint.wire == nil, endpoint.service == nil, configuration.defaultWireProtocol is RESTProtocol { return "" }
        let wire = endpoint.wire ?? endpoint.service.flatMap { configuration.wireProtocols[$0] } ?? configuration.defaultWireProtocol
        if wire is RESTProtocol { return "" }
        return "\(type(of: wire)):\(endpoint.operation ?? endpoint.name):\(endpoint.isNotification)"
    }

    static func build(_ endpoint: EndpointDescription, parts: ClientParts, id: RequestID = RequestID()) throws -> Request {
        try self.build(endpoint, configuration: parts.configuration, base: parts.base, id: id)
    }

    /// Builds the request; `configuration` is borrowed, not copied (it holds objects every
    /// request shares, whose reference counts would otherwise bounce between cores).
    static func build(
        _ endpoint: EndpointDescription, configuration: Client.Configuration, base clientBase: BaseURL?, id: RequestID
    ) throws -> Request {
        var head: HTTPRequest
        if endpoint.path.hasPrefix("https://") || endpoint.path.hasPrefix("http://") {
            guard let url = URL(string: endpoint.path), let target = BaseURL(url),
                let components = URLComponents(url: url, resolvingAgainstBaseURL: false)
            else {
                throw CourierError.invalidRequest("'\(endpoint.path)' is not a valid absolute URL")
            }
            // An absolute URL's path is kept as written: `/items/` and `/items` are different resources.
            var path = components.percentEncodedPath.isEmpty ? "/" : components.percentEncodedPath
            if let query = components.percentEncodedQuery { path += "?" + query }
            head = HTTPRequest(
                method: endpoint.method, scheme: target.scheme, authority: target.authority,
                path: BaseURL.appending(endpoint.query, to: path))
        } else {
            let base: BaseURL
            if let service = endpoint.service {
                guard let servers = configuration.servers else {
                    throw CourierError.invalidRequest("the endpoint names the service '\(service)' but the client has no server directory")
                }
                base = try servers.base(for: service)
            } else if let clientBase {
                base = clientBase
            } else {
                throw CourierError.invalidRequest("the endpoint path '\(endpoint.path)' is relative and the client has no base URL")
            }
            head = HTTPRequest(
                method: endpoint.method, scheme: base.scheme, authority: base.authority,
                path: base.path(appending: endpoint.path, query: endpoint.query))
        }
        var fields = configuration.defaultHeaders
        for field in endpoint.headers {
            fields[field.name] = nil
        }
        fields.append(contentsOf: endpoint.headers)
        for (name, value) in endpoint.rawHeaders {
            let forbidden: Set<Unicode.Scalar> = ["\r", "\n", "\0"]
            if name.unicodeScalars.contains(where: forbidden.contains) || value.unicodeScalars.contains(where: forbidden.contains) {
                throw CourierError.invalidRequest(
                    "the header field '\(Redactor.standard.isSecret(headerName: name) ? "REDACTED" : name.debugDescription)' contains CR, LF or NUL"
                )
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
                body = try endpointBody.encoded(with: configuration.encoder)
            } catch {
                throw CourierError.wrap(error)
            }
            if let contentType = body?.contentType, !head.headerFields.contains(.contentType) {
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
        if configuration.decompression != nil, !head.headerFields.contains(.acceptEncoding) {
            head.headerFields.append(Self.acceptEncoding)
        }
        var request = Request(head: head, body: body, timeout: endpoint.timeout ?? configuration.timeout, name: endpoint.name, id: id)
        if !endpoint.hasOwnName { request.hasOwnName = false }
        return request
    }

    /// The `Accept-Encoding` field sent when the client decodes content, made once: a field's
    /// value is checked each time one is made.
    private static let acceptEncoding = HTTPField(name: .acceptEncoding, value: ContentCoding.offered)
}

/// The identity of a logical request, taken before wire boxing and middleware: what makes two
/// calls "the same" for deduplication.
///
/// Method, URL (query order normalised), body digest, the cache partition (two accounts never
/// share a response), the endpoint's own middleware (a per-endpoint token or signer makes a
/// different request), the endpoint's wire protocol and operation, and the header fields that
/// change a response.
struct LogicalKey: Hashable, Sendable {
    let method: String
    let url: String
    let bodyDigest: Data?
    let partition: String
    let endpointMiddleware: [MiddlewareIdentity]
    let wire: String
    let headers: [String]
    let acceptedStatuses: Range<Int>
    let custom: String?
    /// The fields the cache lookup added (validators, a `Range` for the missing bytes): callers
    /// whose requests the cache changed differently never share one exchange.
    var cachePlan = ""

    /// The key of a logical request; `nil` when it must never be shared: its body is a stream
    /// (it cannot be digested without being consumed), or it has endpoint middleware whose
    /// identity cannot be told (a value that is not `Hashable`, such as a closure).
    init?(request: Request, endpoint: EndpointDescription, partition: String, wire: String, ignoredHeaders: [HTTPField.Name]) {
        self.method = request.head.method.rawValue
        self.url = LogicalKey.normalise(scheme: request.head.scheme, authority: request.head.authority, path: request.head.path)
        if let body = request.body {
            guard let bytes = body.bytes else { return nil }
            self.bodyDigest = Data(SHA256.hash(data: bytes))
        } else {
            self.bodyDigest = nil
        }
        self.partition = partition
        var middleware: [MiddlewareIdentity] = []
        for item in endpoint.middleware {
            guard let identity = Self.identity(of: item) else { return nil }
            middleware.append(identity)
        }
        self.endpointMiddleware = middleware
        self.wire = wire
        var headers: [String] = []
        for field in request.head.headerFields where !ignoredHeaders.contains(field.name) {
            headers.append("\(field.name.canonicalName):\(field.value)")
        }
        self.headers = headers
        self.acceptedStatuses = endpoint.acceptedStatuses
        if case .key(let key) = endpoint.deduplication.mode { self.custom = key } else { self.custom = nil }
    }

    /// A middleware's identity: the object for a class instance, the value for a `Hashable`
    /// value; `nil` for any other value (two closures cannot be told apart).
    static func identity(of middleware: any Middleware) -> MiddlewareIdentity? {
        if type(of: middleware) is AnyClass {
            return MiddlewareIdentity(value: AnyHashable(ObjectIdentifier(middleware as AnyObject)))
        }
        if let hashable = middleware as? any Hashable {
            return MiddlewareIdentity(value: AnyHashable(hashable))
        }
        return nil
    }

    /// `scheme://authority/path?query` with the scheme and host lower-cased (RFC 3986 §6.2.2.1)
    /// and an empty query dropped. The query stays in its order: `?a=1&b=2` and `?b=2&a=1` are
    /// two URIs (RFC 9111 §2 keys on the target URI) that a server may answer differently.
    /// (Query items given as a dictionary are sorted when the endpoint is made.)
    static func normalise(scheme: String?, authority: String?, path: String?) -> String {
        let target = path ?? "/"
        let parts = target.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
        var url = "\((scheme ?? "https").lowercased())://\((authority ?? "").lowercased())\(parts[0])"
        if parts.count == 2, !parts[1].isEmpty {
            url += "?" + parts[1]
        }
        return url
    }
}

/// A middleware's identity in a ``LogicalKey``.
///
/// Unchecked: the value is an `ObjectIdentifier` or a `Hashable` middleware, and every
/// middleware is `Sendable`.
struct MiddlewareIdentity: Hashable, @unchecked Sendable {
    let value: AnyHashable
}

/// An endpoint without its response type: what the stages need to know about it.
///
/// A class, made once per call: the stages pass it along with one reference instead of copying
/// twenty fields at every step.
final class EndpointDescription: Sendable {
    let name: String
    let hasOwnName: Bool
    let method: HTTPRequest.Method
    let path: String
    let query: [URLQueryItem]
    let headers: HTTPFields
    let rawHeaders: [(name: String, value: String)]
    let body: EndpointBody?
    let acceptedStatuses: Range<Int>
    let timeout: Duration?
    let middleware: [any Middleware]
    let priority: RequestPriority
    let deduplication: Deduplication
    let compressesRequestBody: Bool
    let cachePolicy: CachePolicy?
    let retryPolicy: RetryPolicy?
    let isPrefetch: Bool
    let service: ServiceID?
    let wire: (any WireProtocol)?
    let operation: String?
    let isNotification: Bool
    let decoding: ErasedDecoding

    init<Value>(_ endpoint: Endpoint<Value>, decoding: ErasedDecoding, acceptedStatuses: Range<Int>? = nil) {
        self.name = endpoint.name
        self.hasOwnName = endpoint.hasOwnName
        self.method = endpoint.method
        self.path = endpoint.path
        self.query = endpoint.query
        self.headers = endpoint.headers
        self.rawHeaders = endpoint.rawHeaders
        self.body = endpoint.body
        self.acceptedStatuses = acceptedStatuses ?? endpoint.acceptedStatuses
        self.timeout = endpoint.timeout
        self.middleware = endpoint.middleware
        self.priority = endpoint.priority
        self.deduplication = endpoint.deduplication
        self.compressesRequestBody = endpoint.compressesRequestBody
        self.cachePolicy = endpoint.cachePolicy
        self.retryPolicy = endpoint.retryPolicy
        self.isPrefetch = endpoint.isPrefetch
        self.service = endpoint.service
        self.wire = endpoint.wire
        self.operation = endpoint.operation
        self.isNotification = endpoint.isNotification
        self.decoding = decoding
    }

    /// A copy of `other` with these settings replaced (a service's defaults applied).
    init(
        copying other: EndpointDescription, headers: HTTPFields, middleware: [any Middleware], timeout: Duration?,
        retryPolicy: RetryPolicy?, cachePolicy: CachePolicy?
    ) {
        self.name = other.name
        self.hasOwnName = other.hasOwnName
        self.method = other.method
        self.path = other.path
        self.query = other.query
        self.headers = headers
        self.rawHeaders = other.rawHeaders
        self.body = other.body
        self.acceptedStatuses = other.acceptedStatuses
        self.timeout = timeout
        self.middleware = middleware
        self.priority = other.priority
        self.deduplication = other.deduplication
        self.compressesRequestBody = other.compressesRequestBody
        self.cachePolicy = cachePolicy
        self.retryPolicy = retryPolicy
        self.isPrefetch = other.isPrefetch
        self.service = other.service
        self.wire = other.wire
        self.operation = other.operation
        self.isNotification = other.isNotification
        self.decoding = other.decoding
    }
}

extension EndpointDescription {
    /// `endpoint` without its response type. (A function generic over the value type rather
    /// than a property of `Endpoint`: calling a member of `Endpoint<Value>` where `Value` is not
    /// known at compile time looks the endpoint type's metadata up, on every request.)
    static func erasing<Value: Sendable>(_ endpoint: Endpoint<Value>) -> EndpointDescription {
        EndpointDescription(endpoint, decoding: ErasedDecoding(endpoint.decoding))
    }
}

extension Endpoint {
    /// The endpoint without its response type, decoded by `decoding`.
    func erased(decoding: ErasedDecoding, acceptedStatuses: Range<Int>? = nil) -> EndpointDescription {
        EndpointDescription(self, decoding: decoding, acceptedStatuses: acceptedStatuses)
    }
}

/// A base URL split once into the parts every request needs.
struct BaseURL: Sendable {
    let scheme: String
    let authority: String
    /// The base's path without trailing slashes.
    let basePath: String
    /// The base's own query (`key=abc` of `https://api.example/v1?key=abc`), kept on every
    /// request's target after the endpoint's path and before its query items.
    let baseQuery: String?

    init?(_ url: URL) {
        guard let components = URLComponents(url: url, resolvingAgainstBaseURL: true),
            let scheme = components.scheme?.lowercased(), scheme == "http" || scheme == "https",
            let host = components.percentEncodedHost, !host.isEmpty
        else { return nil }
        self.scheme = scheme
        self.authority = components.port.map { "\(host):\($0)" } ?? host
        var path = components.percentEncodedPath
        while path.hasSuffix("/") { path.removeLast() }
        self.basePath = path
        if let query = components.percentEncodedQuery, !query.isEmpty {
            self.baseQuery = query
        } else {
            self.baseQuery = nil
        }
    }

    /// The request target: the base's path, then the endpoint's path, then the base's query and
    /// the endpoint's query items (a base with a query, an API key say, keeps it on every path).
    func path(appending relative: String, query: [URLQueryItem]) -> String {
        // A fragment is never part of the request target (RFC 9110 §7.1); one left in a path
        // would hide the query items appended after it.
        var relative = relative
        if let hash = relative.utf8.firstIndex(of: UInt8(ascii: "#")) { relative = String(relative[..<hash]) }
        var path: String
        if relative.isEmpty {
            path = self.basePath.isEmpty ? "/" : self.basePath
        } else {
            path = self.basePath + (relative.hasPrefix("/") ? relative : "/" + relative)
        }
        if let baseQuery = self.baseQuery {
            // Byte search: `String.contains(String)` goes through NSString on Linux.
            path += (path.utf8.contains(UInt8(ascii: "?")) ? "&" : "?") + baseQuery
        }
        return Self.appending(query, to: path)
    }

    /// `path` with the query items appended, percent-encoded.
    static func appending(_ query: [URLQueryItem], to path: String) -> String {
        guard !query.isEmpty else { return path }
        var path = path
        path += path.utf8.contains(UInt8(ascii: "?")) ? "&" : "?"
        path += query.map { item in
            let name = QueryEncoding.escape(item.name)
            guard let value = item.value else { return name }
            return "\(name)=\(QueryEncoding.escape(value))"
        }.joined(separator: "&")
        return path
    }
}

/// Percent-encoding of query names and values: everything but RFC 3986 unreserved characters
/// (§2.3), as UTF-8 bytes with upper-case hex digits (§2.1).
///
/// Byte by byte, without Foundation: `addingPercentEncoding` with a `CharacterSet` is costly on
/// Linux (measured: Benchmarks/README.md, "Performance choices in the code"), and a value that
/// needs no escaping (the common case) is returned as it is.
enum QueryEncoding {
    static func escape(_ text: String) -> String {
        PercentEncoding.escape(text, keeping: PercentEncoding.isUnreserved)
    }
}

/// A byte-level percent-encoder.
enum PercentEncoding {
    /// RFC 3986 §2.3: `A-Z a-z 0-9 - . _ ~`.
    @inline(__always)
    static func isUnreserved(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
            UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
            return true
        default:
            return false
        }
    }

    /// `text` with every UTF-8 byte that `keeping` refuses written as `%XY`; with `spaceAsPlus`,
    /// a space becomes `+` instead (form encoding).
    static func escape(_ text: String, spaceAsPlus: Bool = false, keeping: (UInt8) -> Bool) -> String {
        let utf8 = text.utf8
        guard let first = utf8.firstIndex(where: { !keeping($0) }) else { return text }
        let hex: StaticString = "0123456789ABCDEF"
        var bytes: [UInt8] = []
        bytes.reserveCapacity(utf8.count + 16)
        bytes.append(contentsOf: utf8[..<first])
        hex.withUTF8Buffer { digits in
            for byte in utf8[first...] {
                if keeping(byte) {
                    bytes.append(byte)
                } else if spaceAsPlus, byte == UInt8(ascii: " ") {
                    bytes.append(UInt8(ascii: "+"))
                } else {
                    bytes.append(UInt8(ascii: "%"))
                    bytes.append(digits[Int(byte >> 4)])
                    bytes.append(digits[Int(byte & 0x0F)])
                }
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
