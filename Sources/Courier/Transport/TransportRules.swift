import Foundation
import HTTPTypes

/// The request-side rules both transports apply, written once: what goes on the wire as header
/// fields, a pinned host never over cleartext, and how a TLS failure reads.
package enum TransportRules {
    /// The errno values that say a connection failed before any byte of a response: refused,
    /// reset, aborted or broken, no route, the network or host down (what `couldNotConnect` marks).
    package static let connectionErrnos: Set<CInt> = [
        ECONNREFUSED, ECONNRESET, ECONNABORTED, EHOSTUNREACH, ENETUNREACH, ENETDOWN, EHOSTDOWN, EPIPE,
    ]

    /// Hands `add` the header fields to send, in order: every field but `Cookie` and the framing
    /// ones (`Content-Length`, `Transfer-Encoding`: the transport frames the body), then the
    /// request's cookies as one `Cookie` field joined by "; " (RFC 6265 §5.4: never more than
    /// one; `HTTPFields` keeps each cookie as a field of its own, for HTTP/2's compression), then
    /// the body's content type when the request sets none. A body's content type with CR, LF or
    /// NUL (a middleware may set one) is refused: it would be sent altered, or as a field of its own.
    @inline(__always)
    package static func wireFields(of request: Request, _ add: (_ name: String, _ value: String) -> Void) throws(CourierError) {
        // RFC 9110 §8.6: a length is 1*DIGIT; a body announced with a negative one (a careless
        // `RequestBody.stream(length:)`) went out with `Content-Length: -1`.
        if let length = request.body?.length, length < 0 {
            throw CourierError.invalidRequest("the request body's announced length is negative (\(length))")
        }
        let fields = request.head.headerFields
        // The body frames itself (RFC 9112 §6.1–6.3): a `Content-Length` or `Transfer-Encoding` a
        // caller or middleware wrote is not sent, and the transport announces the bytes it sends.
        // URLSession sent a caller's length as given: stale once the body was gzipped, or on a
        // request without a body, it left the server waiting; a short one made the rest of the
        // body read as the next request on the connection.
        let hasBody = request.body != nil
        for field in fields where field.name != .cookie && !(Self.isFraming(field.name) && !Self.keeps(field, hasBody: hasBody)) {
            add(field.name.rawName, field.value)
        }
        if let cookie = fields.combinedValue(.cookie) {
            add("Cookie", cookie)
        }
        if let contentType = request.body?.contentType, !fields.contains(.contentType) {
            try self.checkContentType(contentType)
            add("Content-Type", contentType)
        }
    }

    /// Whether a field frames the message (`Content-Length`, `Transfer-Encoding`): the transport's
    /// to write, from the body it sends.
    @inline(__always)
    package static func isFraming(_ name: HTTPField.Name) -> Bool {
        name == .contentLength || name == .transferEncoding
    }

    /// Whether a framing field a caller wrote is kept: only `Content-Length: 0` on a request
    /// without a body (what a server that wants a length, 411, asks of an empty POST).
    private static func keeps(_ field: HTTPField, hasBody: Bool) -> Bool {
        !hasBody && field.name == .contentLength && FieldText.trimmed(field.value) == "0"
    }

    /// Removes the framing fields a caller wrote (but `Content-Length: 0` without a body), so
    /// that the request's fields — in logs, HAR files, a cURL command, the deduplication key —
    /// are the ones sent.
    package static func dropCallersFraming(_ fields: inout HTTPFields, hasBody: Bool) {
        fields = HTTPFields(fields.filter { !Self.isFraming($0.name) || Self.keeps($0, hasBody: hasBody) })
    }

    /// Refuses a body's content type that holds a control character other than a tab (CR, LF
    /// and NUL among them), which no field value may (RFC 9110 §5.5): the same error on both
    /// transports, where AsyncHTTPClient's own check failed as a connection error (and was
    /// retried) and URLSession sent the byte.
    package static func checkContentType(_ contentType: String) throws(CourierError) {
        if contentType.utf8.contains(where: { ($0 < 0x20 && $0 != 0x09) || $0 == 0x7F }) {
            throw CourierError.invalidRequest(
                "the body's content type \(contentType.debugDescription) contains a control character (CR, LF, NUL or another)")
        }
    }

    /// A `Content-Length` value (RFC 9110 §8.6: `1*DIGIT`, between spaces and tabs; several
    /// fields arrive joined by ", ", and are refused), read as AsyncHTTPClient's HTTP/1.1 parser
    /// reads it, on both transports and over HTTP/2 too (where swift-nio-http2 takes `+2` and
    /// repeated fields): anything else, or a value past 2^64 − 1, makes the
    /// response malformed (RFC 9112 §6.3 ¶5), kind `transport`; a value past `Int.max`
    /// saturates, so the size limit refuses the body.
    package static func announcedLength(_ value: String) throws(CourierError) -> Int {
        guard let length = UntrustedNumber.contentLength(value),
            length < Int.max || UInt64(value.trimmingCharacters(in: .whitespaces)) != nil
        else {
            throw CourierError.transport("the response's Content-Length \(value.prefix(64).debugDescription) is not a length")
        }
        return length
    }

    /// Refuses a response that has both `Transfer-Encoding` and `Content-Length`: the mark of
    /// response splitting, which RFC 9112 §6.3 ¶3 says ought to be handled as an error (and
    /// AsyncHTTPClient's parser refuses), kind `transport`.
    package static func refuseFraming(_ fields: HTTPFields) throws(CourierError) {
        if fields.contains(.transferEncoding), fields.contains(.contentLength) {
            throw CourierError.transport("the response has both Transfer-Encoding and Content-Length")
        }
    }

    /// Refuses to reach a pinned host over anything but `https`: a pin must never pass unchecked.
    package static func refuseCleartext(toPinnedHost host: String, scheme: String?) throws(CourierError) {
        guard scheme?.lowercased() == "https" else {
            throw CourierError.invalidRequest("\(host) is pinned and must be reached over https")
        }
    }

    /// The message of a TLS failure: the reason in words (none for a plain handshake failure),
    /// then the platform's own text.
    package static func tlsMessage(_ reason: TLSFailureReason?, platformText: String) -> String {
        "the TLS handshake failed\(reason.flatMap { $0 == .handshakeFailure ? nil : ": \($0)" } ?? "") (\(platformText))"
    }
}
