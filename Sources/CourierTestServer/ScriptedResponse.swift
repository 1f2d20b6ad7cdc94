import Foundation

/// What the test server answers to one request, including ways to misbehave.
public struct ScriptedResponse: Sendable {
    /// How the server sends (or fails to send) the response.
    public enum Behaviour: Sendable {
        /// A well-formed response with `Content-Length`.
        case normal
        /// Close the connection (HTTP/1.1) or reset the stream (HTTP/2) without answering.
        case closeBeforeResponding
        /// Send the head announcing the full length and `bytes` bytes of the body, then close.
        case closeMidBody(afterBytes: Int)
        /// Wait this long before answering (the answer is dropped if the peer has gone).
        case stall(Duration)
        /// Send the head and the first `bytes` bytes of the body, then wait this long before the rest.
        case stallMidBody(afterBytes: Int, Duration)
        /// Send bytes that are not an HTTP response, then close (HTTP/1.1 only).
        case malformed
        /// Send a head cut off in the middle, then close (HTTP/1.1 only).
        case truncatedHead
        /// Send these bytes as the whole response, as they are, then close (HTTP/1.1 only).
        case rawResponse(String)
        /// Announce the body's length but send `extra` more bytes after it (HTTP/1.1 only).
        case bodyLargerThanAnnounced(extra: Data)
        /// Send the body with chunked transfer encoding, in `chunkSize` pieces, `delay` apart.
        case chunked(chunkSize: Int, delay: Duration)
        /// Send the body in writes of `size` bytes, flushed together (HTTP/2: one DATA frame each,
        /// back to back; HTTP/1.1: with `Content-Length`, as one stream of bytes).
        case pieces(size: Int)
        /// Send the body as ``pieces(size:)`` does, then these trailer fields (HTTP/2: a HEADERS
        /// frame that ends the stream after the DATA frames; HTTP/1.1: no trailers are sent).
        case piecesWithTrailers(size: Int, trailers: [(String, String)])
        /// Send `length` bytes of filler (the letter `a`) with `Content-Length`, as fast as the
        /// client reads them, without holding them in memory (for bulk-transfer benchmarks).
        case generated(length: Int)
        /// HTTP/2: reset the stream with RST_STREAM and this error code (7 is REFUSED_STREAM: the
        /// request was not processed) instead of answering. HTTP/1.1: close the connection.
        case resetStream(errorCode: UInt32)
        /// HTTP/2: send GOAWAY on the connection with a last stream ID below this stream's (this
        /// stream and any later one were not processed, RFC 9113 §6.8) and answer nothing on it.
        /// HTTP/1.1: close the connection.
        case goAway
        /// HTTP/2: send `count` PING frames on the connection, then answer normally.
        case pingFlood(count: Int)
        /// HTTP/2: send a HEADERS frame with this `:status` and nothing else (an interim head, as
        /// a 1xx is), then answer normally. HTTP/1.1: answer normally.
        case interimHead(status: Int)
        /// Send the head and `bytes` bytes of the body, then abort the connection with a TCP RST
        /// (SO_LINGER 0), not a FIN.
        case resetMidBody(afterBytes: Int)
        /// HTTP/2: send one HEADERS frame with this `:status` that ends the stream (END_STREAM),
        /// and nothing else. HTTP/1.1: answer normally.
        case headOnlyEndingStream(status: Int)
        /// HTTP/1.1: send the head one byte every `interval` (slow-loris), then the body.
        /// HTTP/2: answer after a long stall instead.
        case slowHead(interval: Duration)
    }

    /// The status code.
    public var status: Int
    /// Header fields, in order.
    public var headers: [(String, String)]
    /// The body.
    public var body: Data
    /// How the response is sent.
    public var behaviour: Behaviour

    /// Creates a response.
    public init(status: Int = 200, headers: [(String, String)] = [], body: Data = Data(), behaviour: Behaviour = .normal) {
        self.status = status
        self.headers = headers
        self.body = body
        self.behaviour = behaviour
    }

    /// A JSON response from text.
    public static func json(_ text: String, status: Int = 200, headers: [(String, String)] = []) -> ScriptedResponse {
        ScriptedResponse(status: status, headers: [("Content-Type", "application/json")] + headers, body: Data(text.utf8))
    }

    /// A JSON response from an encodable value.
    public static func json<Value: Encodable>(encoding value: Value, status: Int = 200) -> ScriptedResponse {
        let data = (try? JSONEncoder().encode(value)) ?? Data()
        return ScriptedResponse(status: status, headers: [("Content-Type", "application/json")], body: data)
    }

    /// A plain-text response.
    public static func text(_ text: String, status: Int = 200, headers: [(String, String)] = []) -> ScriptedResponse {
        ScriptedResponse(status: status, headers: [("Content-Type", "text/plain; charset=utf-8")] + headers, body: Data(text.utf8))
    }

    /// The same response sent with another behaviour.
    public func with(_ behaviour: Behaviour) -> ScriptedResponse {
        var copy = self
        copy.behaviour = behaviour
        return copy
    }

    /// The value of the first header field with the given name.
    public func header(_ name: String) -> String? {
        self.headers.first { $0.0.lowercased() == name.lowercased() }?.1
    }
}

/// A request as the test server received it.
public struct RecordedRequest: Sendable {
    /// The method, such as `GET`.
    public var method: String
    /// The request target: path and query.
    public var uri: String
    /// Header fields, in order.
    public var headers: [(String, String)]
    /// The body (empty when the server does not keep request bodies).
    public var body: Data
    /// The number of body bytes received.
    public var bodyLength: Int
    /// `HTTP/1.1` or `HTTP/2`.
    public var httpVersion: String
    /// Which connection carried the request (numbered from 1 in order of arrival).
    public var connectionID: Int

    /// The path without the query.
    public var path: String { String(self.uri.split(separator: "?", maxSplits: 1).first ?? "") }

    /// The query items.
    public var query: [String: String] {
        guard let components = URLComponents(string: self.uri) else { return [:] }
        var items: [String: String] = [:]
        for item in components.queryItems ?? [] { items[item.name] = item.value ?? "" }
        return items
    }

    /// The value of the first header field with the given name.
    public func header(_ name: String) -> String? {
        self.headers.first { $0.0.lowercased() == name.lowercased() }?.1
    }
}
