import Crypto
import Foundation
import HTTPTypes

/// A request on its way through the middleware chain to the transport.
///
/// The head is an `HTTPRequest` from swift-http-types (method, scheme, authority, path, header
/// fields); the body is a ``RequestBody``. Middleware receives a `Request`, may change it, and
/// passes it on.
public struct Request: Sendable {
    /// Method, target and header fields.
    public var head: HTTPRequest
    /// The body to send, if any.
    public var body: RequestBody?
    /// When the exchange must be over; past it, transports and body reads fail with kind `timeout`.
    ///
    /// Set from the endpoint's (or client's) timeout when the request is built, so retries and
    /// redirects share one deadline.
    public var deadline: ContinuousClock.Instant? {
        get { self.deadlineOffset.map(FixedInstant.instant(at:)) }
        set { self.deadlineOffset = newValue.map(FixedInstant.offset(of:)) }
    }
    /// The deadline as a time since ``FixedInstant/reference``. A `Duration` has a fixed layout;
    /// a stored `ContinuousClock.Instant` (a type the standard library may change) would make
    /// `Request`, and every value holding one, sized only at run time, so that each async
    /// function with such a local allocates it from its task on entry, whichever path it takes.
    private var deadlineOffset: Duration?
    /// The name of the endpoint that made the request, for logs and metrics.
    public var name: String
    /// Whether the endpoint was given its ``name`` (else it is `METHOD path`, which metrics and
    /// traces do not use as a label).
    package var hasOwnName = true
    /// Whether the endpoint's absolute URL leads away from the origin of its client's (or its
    /// service's) base URL: the credentials the client adds by default stay home then, the
    /// client's default fields that carry them and an ``OAuth2Authenticator`` without an audience alike.
    package var leavesHome = false
    /// A short identifier of this request, shared by its log lines.
    public let id: RequestID
    /// Which attempt this is: 1, then 2, 3, … when the retry stage sends the request again.
    public internal(set) var attempt: Int = 1
    /// The logical request this one was boxed from, kept for fixture recording and replay
    /// (set only when a fixture recorder or replay transport asks for it).
    package var logical: LogicalRequest?

    /// Creates a request.
    public init(
        head: HTTPRequest, body: RequestBody? = nil, timeout: Duration? = nil, name: String = "request", id: RequestID = RequestID()
    ) {
        self.head = head
        self.body = body
        self.deadlineOffset = timeout.map { FixedInstant.offset(of: ContinuousClock.now + $0) }
        self.name = name
        self.id = id
    }

    /// The time left until the deadline (zero once it has passed), or `nil` without a deadline.
    public var remainingTime: Duration? {
        guard let deadline = self.deadline else { return nil }
        let left = deadline - ContinuousClock.now
        return left > .zero ? left : .zero
    }

    /// The absolute URL of the request.
    public var url: URL? { URL(string: self.urlString) }

    /// The absolute URL of the request as text, built without parsing.
    public var urlString: String {
        // Copied byte by byte into one string of the right size: interpolation, or appending
        // piece by piece, cost more here (measured: Benchmarks/README.md, "Performance choices
        // in the code"), and this runs for every request (the transport's URL, the finished event).
        var scheme = self.head.scheme ?? "https"
        var authority = self.head.authority ?? ""
        var path = self.head.path ?? "/"
        let separator: StaticString = "://"
        let count = scheme.utf8.count + separator.utf8CodeUnitCount + authority.utf8.count + path.utf8.count
        return scheme.withUTF8 { scheme in
            authority.withUTF8 { authority in
                path.withUTF8 { path in
                    String(unsafeUninitializedCapacity: count) { buffer in
                        var offset = 0
                        func copy(_ part: UnsafeBufferPointer<UInt8>) {
                            _ = UnsafeMutableBufferPointer(rebasing: buffer[offset...]).initialize(fromContentsOf: part)
                            offset += part.count
                        }
                        copy(scheme)
                        copy(UnsafeBufferPointer(start: separator.utf8Start, count: separator.utf8CodeUnitCount))
                        copy(authority)
                        copy(path)
                        return offset
                    }
                }
            }
        }
    }
}

/// A short random identifier that ties together the log lines of one request.
public struct RequestID: Sendable, Hashable, CustomStringConvertible {
    /// The identifier's value.
    public let value: UInt32

    /// Creates a new identifier, unique within the process and unpredictable across processes.
    public init() {
        // A counter scrambled by an odd multiplier (a bijection on UInt32) and a per-process seed:
        // distinct ids without a system call per request.
        let count = Self.counter.withLock { value -> UInt32 in
            value &+= 1
            return value
        }
        self.value = (count &* 0x9E37_79B1) ^ Self.seed
    }

    private static let seed = UInt32.random(in: .min ... .max)
    private static let counter = Locked<UInt32>(0)

    /// The identifier as eight hexadecimal digits.
    public var description: String {
        // Eight ASCII bytes fit a small string: no allocation (it is on every log line).
        String(unsafeUninitializedCapacity: 8) { buffer in
            let digits: StaticString = "0123456789abcdef"
            for index in 0..<8 {
                let nibble = Int((self.value >> UInt32(28 - 4 * index)) & 0xF)
                buffer[index] = digits.utf8Start[nibble]
            }
            return 8
        }
    }
}

/// A response as it comes back from the transport, before decoding.
public struct RawResponse: Sendable {
    /// Status and header fields.
    public var head: HTTPResponse {
        didSet { self.statusCode = self.head.status.code }
    }
    /// The status code of ``head``, taken when it is set: `HTTPResponse.status` reads the code
    /// from the text of the status field each time, and the stages ask for it about ten times
    /// per response.
    private(set) var statusCode: Int
    /// The body, usually still streaming from the connection.
    public var body: ResponseBody
    /// The protocol version the response arrived over.
    public var version: HTTPVersion
    /// The URL that produced this response (after redirects).
    public var url: URL?
    /// Whether the platform decoded a content coding the server applied (URLSession decodes gzip,
    /// deflate and br itself, and drops nothing but the fields that described it): the body's
    /// bytes are not the representation's, so they cannot be counted as a range of it.
    package var decodedByPlatform = false
    /// Whether a redirect on the way led through another origin than the request's: the hops
    /// after it went without the request's credentials (``RedirectPolicy/sensitiveFields``), so
    /// a 401 at the end says nothing about them, wherever it came from.
    package var leftOrigin = false

    /// Creates a response.
    public init(head: HTTPResponse, body: ResponseBody = .empty, version: HTTPVersion = .http1_1, url: URL? = nil) {
        self.head = head
        self.statusCode = head.status.code
        self.body = body
        self.version = version
        self.url = url
    }

    /// The status of the response.
    public var status: HTTPResponse.Status { self.head.status }
}

/// What identifies a logical request across runs: method, path and query, wire protocol and body
/// (no host, no wire id, no token), for naming recorded fixtures.
package final class LogicalRequest: Sendable {
    package let method: String
    package let pathAndQuery: String
    package let wire: String
    package let body: Data?

    init(_ request: Request, wire: String) {
        self.method = request.head.method.rawValue
        self.pathAndQuery = request.head.path ?? "/"
        self.wire = wire
        self.body = request.body?.bytes
    }

    /// A stable digest of the logical request, as hex.
    package var fingerprint: String {
        Request.fingerprint(method: self.method, pathAndQuery: self.pathAndQuery, wire: self.wire, body: self.body)
    }
}

extension Request {
    /// A stable digest of a request's method, path and query, wire protocol and body, as hex.
    package static func fingerprint(method: String, pathAndQuery: String, wire: String, body: Data?) -> String {
        var hasher = SHA256()
        hasher.update(data: Data("\(method)\n\(pathAndQuery)\n\(wire)\n".utf8))
        if let body { hasher.update(data: body) }
        return hasher.finalize().map { String(format: "%02x", $0) }.joined()
    }
}

/// A transport that needs the logical request of what it is sent (``Request/logical``): a
/// fixture replay transport names its files after it.
package protocol ReadsLogicalRequests: Transport {}

/// An event monitor that needs the logical request of what it sees (``Request/logical``): a
/// fixture recorder names its files after it.
package protocol RecordsLogicalRequests: EventMonitor {}
