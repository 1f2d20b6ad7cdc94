import Crypto
import Foundation
import HTTPTypes

/// The canonical text a request signature covers, shared by ``RequestSigner`` and ``SignatureVerifier``.
///
/// Lines, joined by `\n`: the method as sent (methods are case-sensitive, RFC 9110 §9.1), path,
/// the query items (as sent, percent-encoded) sorted by name — the name's bytes percent-decoded,
/// with `+` and space as one byte, so that names a server may read as one sort as one — with
/// items of the same name kept in the order sent (`a=1&a=2` and `a=2&a=1` are two requests: a
/// server may read the first value; so are `a=1&%61=2` and `%61=2&a=1`, and `a+b=1&a%20b=2`
/// and its reverse), the lower-case hex SHA-256 of the body, the timestamp (Unix seconds), the
/// nonce.
public enum SignatureCanonicalForm {
    /// The canonical text of a request.
    public static func text(method: String, target: String, body: Data, timestamp: String, nonce: String) -> String {
        let parts = target.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
        let path = parts.isEmpty ? "/" : String(parts[0])
        let query = parts.count == 2 ? Self.sortedByName(parts[1].split(separator: "&")).joined(separator: "&") : ""
        let digest = SHA256.hex(body)
        return [method, path.isEmpty ? "/" : path, query, digest, timestamp, nonce].joined(separator: "\n")
    }

    /// Query items sorted by name, stable: items of one name keep their order. A name is the
    /// bytes before the first `=`, percent-decoded byte by byte (`%ff` and `%FF` are one byte,
    /// whether or not the bytes are UTF-8), with `+` and space taken as one byte: a server that
    /// reads the query as a form reads `+` as a space, one that does not reads it as a plus, and
    /// taking them as one only makes more names equal, which keeps more of the order sent — safe
    /// for either server.
    static func sortedByName(_ items: [Substring]) -> [Substring] {
        func name(_ item: Substring) -> [UInt8] {
            let utf8 = Array(item.utf8)
            let end = utf8.firstIndex(of: UInt8(ascii: "=")) ?? utf8.endIndex
            var bytes: [UInt8] = []
            bytes.reserveCapacity(end)
            var index = 0
            while index < end {
                var byte = utf8[index]
                if byte == UInt8(ascii: "%"), index + 2 < end, let high = Self.hexValue(utf8[index + 1]),
                    let low = Self.hexValue(utf8[index + 2])
                {
                    byte = high << 4 | low
                    index += 2
                }
                bytes.append(byte == UInt8(ascii: "+") ? UInt8(ascii: " ") : byte)
                index += 1
            }
            return bytes
        }
        return items.map { (name($0), $0) }.enumerated().sorted { left, right in
            let (a, b) = (left.element.0, right.element.0)
            if a == b { return left.offset < right.offset }
            return a.lexicographicallyPrecedes(b)
        }.map(\.element.1)
    }

    /// The value of an ASCII hex digit; `nil` for any other byte.
    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    static func mac(_ text: String, key: SymmetricKey) -> String {
        Data(HMAC<SHA256>.authenticationCode(for: Data(text.utf8), using: key)).base64EncodedString()
    }
}

/// The header names a signature travels in.
public struct SignatureHeaders: Sendable, Hashable {
    /// The signature (base64 HMAC-SHA256).
    public var signature: HTTPField.Name
    /// The timestamp (Unix seconds).
    public var timestamp: HTTPField.Name
    /// The nonce.
    public var nonce: HTTPField.Name
    /// The key identifier, if any.
    public var keyID: HTTPField.Name

    /// Creates header names; the defaults are `X-Signature`, `X-Signature-Timestamp`, `X-Signature-Nonce`, `X-Signature-Key`.
    public init(
        signature: HTTPField.Name = HTTPField.Name("X-Signature")!,
        timestamp: HTTPField.Name = HTTPField.Name("X-Signature-Timestamp")!,
        nonce: HTTPField.Name = HTTPField.Name("X-Signature-Nonce")!,
        keyID: HTTPField.Name = HTTPField.Name("X-Signature-Key")!
    ) {
        self.signature = signature
        self.timestamp = timestamp
        self.nonce = nonce
        self.keyID = keyID
    }

    /// All the names, for a redirect policy's sensitive fields.
    public var all: [HTTPField.Name] { [self.signature, self.timestamp, self.nonce, self.keyID] }
}

/// Middleware that signs each request with HMAC-SHA256 just before it leaves (after queueing),
/// so the timestamp is fresh when the request is sent.
///
/// The signature covers the bytes actually sent. A body held in memory is hashed as is, also
/// when it is sent as a stream of its bytes (as ``Client/upload(_:)`` sends one, to report
/// progress). Any other streamed body cannot be hashed without consuming it: such requests fail
/// with `invalidRequest`.
///
/// The signature covers neither scheme nor host: a request signed for one origin verifies at
/// another that shares the key. Give `audience` when the client reaches more than the API, so a
/// presigned URL or a third party's API never gets a signature it could replay.
public struct RequestSigner: Middleware {
    private let key: SymmetricKey
    private let keyID: String?
    private let headers: SignatureHeaders
    private let now: @Sendable () -> Date
    /// `audience` as origins; `nil` for every origin.
    private var audience: Set<Authority>?

    /// Creates a signer that signs every request.
    public init(
        key: SymmetricKey, keyID: String? = nil, headers: SignatureHeaders = SignatureHeaders(),
        now: @escaping @Sendable () -> Date = Date.init
    ) {
        self.key = key
        self.keyID = keyID
        self.headers = headers
        self.now = now
        self.audience = nil
    }

    /// Creates a signer that signs only requests to `audience`.
    ///
    /// - Parameters:
    ///   - key: the shared secret the signature is made with.
    ///   - keyID: sent in the key field, so the server can pick the key; none when `nil`.
    ///   - headers: the names of the fields the signature travels in.
    ///   - audience: the origins signed for (the scheme, host and port of each URL; its path is
    ///     ignored). A request to any other origin goes on unsigned; a URL without a scheme and
    ///     host names no origin, and is left out.
    ///   - now: the clock the timestamp is read from.
    public init(
        key: SymmetricKey, keyID: String? = nil, headers: SignatureHeaders = SignatureHeaders(), audience: [URL],
        now: @escaping @Sendable () -> Date = Date.init
    ) {
        self.init(key: key, keyID: keyID, headers: headers, now: now)
        self.audience = Set(audience.compactMap(Authority.init))
    }

    /// Adds the timestamp, nonce and signature headers (for a request to the audience, if one is set).
    public func intercept(_ request: Request, next: Next) async throws -> RawResponse {
        if let audience = self.audience {
            guard let target = Authority(scheme: request.head.scheme, authority: request.head.authority), audience.contains(target) else {
                return try await next(request)
            }
        }
        return try await next(self.signed(request))
    }

    /// The request with its timestamp, nonce and signature fields (synchronous and apart from
    /// `intercept`, so that its values stay out of the async frame).
    @inline(never)
    private func signed(_ request: Request) throws -> Request {
        var signed = request
        let body: Data
        if let requestBody = request.body {
            guard let bytes = requestBody.sentBytes else { throw CourierError.invalidRequest("a streamed body cannot be signed") }
            body = bytes
        } else {
            body = Data()
        }
        let timestamp = String(Int(self.now().timeIntervalSince1970))
        let nonce = UUID().uuidString.lowercased()
        let text = SignatureCanonicalForm.text(
            method: request.head.method.rawValue, target: request.head.path ?? "/", body: body, timestamp: timestamp, nonce: nonce)
        signed.head.headerFields[self.headers.timestamp] = timestamp
        signed.head.headerFields[self.headers.nonce] = nonce
        signed.head.headerFields[self.headers.signature] = SignatureCanonicalForm.mac(text, key: self.key)
        if let keyID = self.keyID { signed.head.headerFields[self.headers.keyID] = keyID }
        return signed
    }
}

/// Checks signatures made by ``RequestSigner``, for a server (and for tests): rejects a wrong
/// signature, a replayed nonce and a timestamp outside the allowed skew.
public final class SignatureVerifier: Sendable {
    /// Why a request was rejected.
    public enum Rejection: Error, Sendable, Equatable {
        /// A signature header is missing.
        case missingHeaders
        /// The signature does not match the request.
        case badSignature
        /// The nonce was seen before.
        case replayedNonce
        /// The timestamp is too old or too far in the future.
        case staleTimestamp
    }

    private let key: SymmetricKey
    private let maxSkew: TimeInterval
    private let seen = Locked<[String: Date]>([:])

    /// Creates a verifier accepting timestamps within `maxSkew` seconds of now.
    public init(key: SymmetricKey, maxSkew: TimeInterval = 300) {
        self.key = key
        self.maxSkew = maxSkew
    }

    /// Verifies a request given its method, target (path and query), body and header values.
    public func verify(
        method: String, target: String, body: Data, signature: String?, timestamp: String?, nonce: String?, now: Date = Date()
    ) throws {
        // The timestamp is whole seconds, digits only (no sign, exponent, "nan" or "inf"); one
        // too large for `Int` saturates and is then stale.
        guard let signature, let timestamp, let nonce, let whole = UntrustedNumber.digits(timestamp) else { throw Rejection.missingHeaders }
        let seconds = TimeInterval(whole)
        let text = SignatureCanonicalForm.text(method: method, target: target, body: body, timestamp: timestamp, nonce: nonce)
        // Compared in constant time (a comparison that stops at the first differing byte tells
        // an attacker how much of a guess was right).
        guard let code = Data(base64Encoded: signature),
            HMAC<SHA256>.isValidAuthenticationCode(code, authenticating: Data(text.utf8), using: self.key)
        else {
            throw Rejection.badSignature
        }
        guard abs(now.timeIntervalSince1970 - seconds) <= self.maxSkew else { throw Rejection.staleTimestamp }
        try self.seen.withLock { seen in
            seen = seen.filter { now.timeIntervalSince($0.value) <= self.maxSkew * 2 }
            guard seen[nonce] == nil else { throw Rejection.replayedNonce }
            seen[nonce] = now
        }
    }
}
