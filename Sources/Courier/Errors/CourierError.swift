import Foundation
import HTTPTypes

/// The one error type Courier throws.
///
/// Switch on ``kind`` (a small, stable set); the other properties carry the details that apply to
/// that kind. `description` never contains credentials: header values that carry secrets are
/// redacted and body excerpts are short.
public struct CourierError: Error, Sendable, CustomStringConvertible {
    /// What went wrong: one of a set of kinds that may grow in a minor version.
    ///
    /// Compare with `==` or match in a `switch` (`case .timeout:`); a `switch` over kinds needs a
    /// `default` case, because a later version may add kinds. ``description`` is the kind's
    /// stable name (`httpStatus`, `timeout`, …), for logs and metrics.
    public struct Kind: Sendable, Hashable, CustomStringConvertible {
        private enum Base: String, Sendable, Hashable {
            case transport, timeout, cancelled, httpStatus, decoding, invalidRequest, responseTooLarge, redirect, tls, constrained,
                business, rpc, authenticationRequired, pinMismatch, middleware
        }

        private let base: Base

        private init(_ base: Base) {
            self.base = base
        }

        /// The connection failed, was closed early, or the response could not be parsed.
        public static let transport = Kind(.transport)
        /// The request took longer than its timeout.
        public static let timeout = Kind(.timeout)
        /// The request was cancelled by its caller.
        public static let cancelled = Kind(.cancelled)
        /// The server answered with a status the endpoint does not accept.
        public static let httpStatus = Kind(.httpStatus)
        /// The body could not be decoded into the expected type.
        public static let decoding = Kind(.decoding)
        /// The request could not be built or sent as asked (bad URL, bad header, one-shot body resent).
        public static let invalidRequest = Kind(.invalidRequest)
        /// The response body exceeded the configured maximum size.
        public static let responseTooLarge = Kind(.responseTooLarge)
        /// A redirect could not be followed (too many, a loop, a downgrade to http).
        public static let redirect = Kind(.redirect)
        /// The TLS handshake failed (untrusted certificate, wrong host name).
        public static let tls = Kind(.tls)
        /// A prefetch request was refused because the client is in constrained (Low Data) mode.
        public static let constrained = Kind(.constrained)
        /// The server's envelope carried a non-success business code (its message is in ``CourierError/message``).
        public static let business = Kind(.business)
        /// The JSON-RPC server answered with an error object.
        public static let rpc = Kind(.rpc)
        /// The server requires the user to authenticate again.
        public static let authenticationRequired = Kind(.authenticationRequired)
        /// The server's certificate did not match the host's TLS pins; nothing was sent.
        public static let pinMismatch = Kind(.pinMismatch)
        /// A middleware threw an error of its own; it is in ``CourierError/underlying``, and
        /// ``CourierError/context`` names the middleware.
        public static let middleware = Kind(.middleware)

        /// The kind's stable name, such as `httpStatus`.
        public var description: String { self.base.rawValue }
    }

    /// What went wrong.
    public let kind: Kind
    /// A human-readable explanation.
    ///
    /// Courier's own text names no secret, but the message may carry a server's text (a business
    /// message) or a platform error's, which can hold a URL with its query: show it to the user,
    /// log ``description`` (which hides secrets as the client's redactor does).
    public var message: String
    /// The error that caused this one, when there is one.
    public var underlying: (any Error)?
    /// The status of the response, for `httpStatus` errors, for errors of a response's body
    /// (too large, cut short, undecodable) once its head had arrived, and for a request
    /// cancelled (`cancelled`) after the server's answer came.
    public package(set) var status: HTTPResponse.Status?
    /// The header fields of the response, whenever ``status`` is set.
    public package(set) var headers: HTTPFields?
    /// The body of the response (up to the maximum response size), for `httpStatus` and `decoding` errors.
    public package(set) var body: Data?
    /// The type that failed to decode, for `decoding` errors.
    public package(set) var decodingType: String?
    /// The coding path where decoding failed, such as `items[2].title`, for `decoding` errors.
    public package(set) var codingPath: String?
    /// The size limit that was exceeded, for `responseTooLarge` errors.
    public package(set) var limit: Int?
    /// The server's code, for `business` errors (as text) and `rpc` errors.
    public var code: String?
    /// The error object's `data`, for `rpc` errors.
    public package(set) var rpcData: JSONValue?
    /// The event a `business` code maps to (such as `sessionExpired`), if any.
    public var event: String?
    /// Why the TLS connection failed, for `tls` and `pinMismatch` errors, when the transport could tell.
    public package(set) var tlsReason: TLSFailureReason?
    /// How a user interface should present the error, as decided by the client's classifier.
    public package(set) var presentation: ErrorPresentation = .alert
    /// Which request, attempt and pipeline stage failed; set for every error a ``Client`` throws.
    public package(set) var context: ErrorContext?
    /// The client's own redactor (when not the standard one), which ``bodyExcerpt(limit:)`` and
    /// ``description`` hide secrets with; set as the error leaves the client.
    package var redactor: Redactor?
    /// Set by a transport when the server provably did not process the request (an HTTP/2
    /// stream it refused with REFUSED_STREAM): the retry stage may then send any method again.
    package var wasNotProcessed = false
    /// Set by the transport stage on what the transport threw (not on a middleware's error of
    /// the same kind): the retry stage's sign that the connection, not the app, failed.
    package var isFromTransport = false
    /// Set when the body of this request's own response was lost after its head arrived (too
    /// large, cut short, undecodable): ``status`` is then the server's answer to this request.
    /// Cleared when the error is re-attributed from another request (a token refresh's, say).
    package var bodyLostAfterHead = false

    /// Takes on the answer `error` carries when its body was lost after the head (status,
    /// fields and ``bodyLostAfterHead``): for an error made in its place (a timeout for a body
    /// that stalled, a cancellation), so a caller still knows the server answered.
    package mutating func keepAnswer(of error: (any Error)?) {
        guard let source = error as? CourierError, source.bodyLostAfterHead, self.status == nil else { return }
        self.status = source.status
        self.headers = source.headers
        self.bodyLostAfterHead = true
    }
    /// Set by a transport that has been shut down: sending again through it cannot succeed, so
    /// the retry stage does not.
    package var transportIsShutDown = false

    /// The error of a transport that has been shut down, alike on every transport.
    package static func transportShutDown(underlying: (any Error)? = nil) -> CourierError {
        var error = CourierError(.transport, "the transport is shut down", underlying: underlying)
        error.transportIsShutDown = true
        return error
    }
    /// Whether the connection failed before any byte of a response: refused, reset or closed,
    /// a name that does not resolve, no route — not a timeout, a malformed answer, a refused
    /// stream or an invalid request (the server was reached, or nothing was tried). Set by
    /// Courier's transports, and by ``connectionFailed(_:underlying:)`` for a transport of your
    /// own; the cache then may answer with a stored response
    /// (``CachePolicy/servingStaleWhenDisconnected(_:)``).
    public package(set) var couldNotConnect = false

    /// Creates an error of the given kind.
    public init(_ kind: Kind, _ message: String, underlying: (any Error)? = nil) {
        self.kind = kind
        self.message = message
        self.underlying = underlying
    }

    /// A short, stable, low-cardinality name for metrics, such as `http_status_503`.
    ///
    /// A business code is the server's text: in this name it keeps only visible ASCII (any other
    /// byte becomes `_`) and its first 64 bytes, so no server can write a line break, a terminal
    /// escape or a megabyte into a log line or a metric label.
    public var shortDescription: String {
        if self.kind == .httpStatus, let status = self.status { return "http_status_\(status.code)" }
        if self.kind == .business || self.kind == .rpc, let code = self.code {
            return "\(self.kind.description)_\(Self.printable(code, limit: 64))"
        }
        return self.kind.description
    }

    /// `text` with every byte that is not visible ASCII replaced by `_`, cut to `limit` bytes
    /// (`...` marks the cut).
    static func printable(_ text: String, limit: Int) -> String {
        let bytes = text.utf8
        let isVisible = { (byte: UInt8) in byte > 0x20 && byte < 0x7F }
        if bytes.count <= limit, bytes.allSatisfy(isVisible) { return text }
        let kept = bytes.prefix(limit).map { isVisible($0) ? $0 : UInt8(ascii: "_") }
        return String(decoding: kept, as: UTF8.self) + (bytes.count > limit ? "..." : "")
    }

    /// The body as text for logs and error messages: secrets hidden (as the client's
    /// ``Client/Configuration/redactor`` hides them in free text: tokens, passwords, secret header
    /// lines, the names it was given), cut to `limit` characters.
    ///
    /// ``body`` itself is the bytes as they came: a token response that failed to decode still
    /// holds its tokens there.
    public func bodyExcerpt(limit: Int = 200) -> String? {
        guard let body = self.body, !body.isEmpty else { return nil }
        let limit = max(limit, 0)
        // Redacted before the cut, so the cut never leaves half a quoted secret unrecognised.
        // (A limit past the body takes all of it: `limit * 4` could overflow.)
        let window = limit >= body.count ? body.count : limit * 4 + 4096
        let text = (self.redactor ?? .standard).redactFreeText(String(decoding: body.prefix(window), as: UTF8.self))
        return text.count > limit ? String(text.prefix(limit)) + "…" : text
    }

    /// The error as one line of text: its message with secrets hidden (as in the body excerpt)
    /// and at most 500 characters, then the body excerpt; control characters, line and paragraph
    /// separators and bidirectional controls as spaces (a message or a body may hold the server's
    /// words: a content type, an envelope's or a JSON-RPC error's message, an error page).
    public var description: String {
        var message = (self.redactor ?? .standard).redactFreeText(self.message)
        if message.count > 500 { message = String(message.prefix(500)) + "…" }
        var text = "CourierError.\(self.kind.description): \(message)"
        if let excerpt = self.bodyExcerpt(limit: 120) {
            text += " — body: \(excerpt)"
        }
        return Self.oneLine(text)
    }

    /// `text` with every scalar that breaks or reorders a line of a log written as a space.
    package static func oneLine(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: Self.breaksALine) else { return text }
        return String(String.UnicodeScalarView(text.unicodeScalars.map { Self.breaksALine($0) ? " " : $0 }))
    }

    /// Whether a scalar breaks or reorders a line of a log: control characters, line and
    /// paragraph separators, and bidirectional marks and overrides.
    package static func breaksALine(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0..<0x20, 0x7F...0x9F, 0x2028, 0x2029, 0x200E, 0x200F, 0x202A...0x202E, 0x2066...0x2069: true
        default: false
        }
    }
}

extension CourierError {
    /// A `transport` error for a connection that failed before any byte of a response
    /// (``couldNotConnect``): what a transport of your own, or a `StubTransport` standing in for
    /// an offline network, throws for a refused, reset or closed connection, a name that does not
    /// resolve or no route — so that the cache can answer stale, as it does for Courier's own
    /// transports (RFC 9111 §4.2.4).
    public static func connectionFailed(_ message: String, underlying: (any Error)? = nil) -> CourierError {
        var error = CourierError(.transport, message, underlying: underlying)
        error.couldNotConnect = true
        return error
    }

    package static func transport(_ message: String, underlying: (any Error)? = nil) -> CourierError {
        CourierError(.transport, message, underlying: underlying)
    }

    package static func timeout(_ message: String = "the request timed out", underlying: (any Error)? = nil) -> CourierError {
        CourierError(.timeout, message, underlying: underlying)
    }

    package static func cancelled(underlying: (any Error)? = nil) -> CourierError {
        CourierError(.cancelled, "the request was cancelled", underlying: underlying)
    }

    package static func invalidRequest(_ reason: String) -> CourierError {
        CourierError(.invalidRequest, reason)
    }

    package static func responseTooLarge(limit: Int) -> CourierError {
        var error = CourierError(.responseTooLarge, "the response body exceeded the limit of \(limit) bytes")
        error.limit = limit
        return error
    }

    package static func httpStatus(_ response: HTTPResponse, body: Data?) -> CourierError {
        var error = CourierError(.httpStatus, "the server answered \(response.status.code) \(response.status.reasonPhrase)")
        error.status = response.status
        error.headers = response.headerFields
        error.body = body
        return error
    }

    package static func decoding(type: Any.Type, codingPath: String?, reason: String, body: Data?, underlying: (any Error)?) -> CourierError
    {
        let path = codingPath.map { $0.isEmpty ? "" : " at \($0)" } ?? ""
        var error = CourierError(.decoding, "could not decode \(type)\(path): \(reason)", underlying: underlying)
        error.decodingType = String(describing: type)
        error.codingPath = codingPath
        error.body = body
        return error
    }

    package static func business(code: String, message: String) -> CourierError {
        var error = CourierError(.business, message)
        error.code = code
        return error
    }

    package static func rpc(code: Int, message: String, data: JSONValue?) -> CourierError {
        var error = CourierError(.rpc, message)
        error.code = "\(code)"
        error.rpcData = data
        return error
    }

    /// Wraps any error thrown inside the pipeline into a `CourierError`, keeping ones that already are.
    package static func wrap(_ error: any Error) -> CourierError {
        if let error = error as? CourierError { return error }
        if error is CancellationError { return .cancelled(underlying: error) }
        return .transport(String(describing: error), underlying: error)
    }
}
