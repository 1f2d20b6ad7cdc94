import Crypto
import Foundation
import HTTPTypes

/// A base URL split once into the parts every request needs.
struct BaseURL: Sendable {
    let scheme: String
    let authority: String
    /// The base's path without trailing slashes.
    let basePath: String
    /// The base's path as written (`/` when empty): the target of an endpoint whose path is empty
    /// or a query alone (RFC 3986 §5.2.2 keeps the base's path then, its trailing `/` included).
    let ownPath: String
    /// The base's own query (`key=abc` of `https://api.example/v1?key=abc`), kept on every
    /// request's target after the endpoint's path and before its query items.
    let baseQuery: String?

    init?(_ url: URL) {
        guard let components = URLComponents(url: url, resolvingAgainstBaseURL: true),
            let scheme = components.scheme?.lowercased(), scheme == "http" || scheme == "https",
            // The host as DNS, TLS and the `Host` field need it: a name in Unicode (or written as
            // punycode) in its IDNA `xn--` form (RFC 3986 §3.2.2), not percent-encoded UTF-8.
            let host = components.encodedHost, !host.isEmpty
        else { return nil }
        self.scheme = scheme
        self.authority = components.port.map { "\(host):\($0)" } ?? host
        var path = components.percentEncodedPath
        self.ownPath = path.isEmpty ? "/" : path
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
        relative = PercentEncoding.escapeTarget(relative)
        var path: String
        if relative.isEmpty {
            // An empty path names the base itself (RFC 3986 §5.2.2): `https://h/rpc/` is `/rpc/`.
            path = self.ownPath
        } else if relative.hasPrefix("?") {
            // A query alone names the base's own path with that query (RFC 3986 §5.2.2), as
            // written, its trailing `/` included.
            path = self.ownPath + relative
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

    /// A path and query (and, with `keepingFragment`, a fragment after `#`) with every byte
    /// ``isTargetByte(_:)`` refuses percent-encoded, and a `%` that starts no `%XY` as `%25`:
    /// bytes already percent-encoded stay as written. Returned as it is when nothing needs it.
    static func escapeTarget(_ text: String, keepingFragment: Bool = false) -> String {
        var text = text
        // The bytes in place (a native string's own storage: nothing is allocated to look).
        let first = text.withUTF8 { utf8 in utf8.indices.first { !Self.keeps(utf8, at: $0, fragment: keepingFragment) } }
        guard let first else { return text }
        return text.withUTF8 { utf8 -> String in
            let hex: StaticString = "0123456789ABCDEF"
            var bytes: [UInt8] = Array(utf8[..<first])
            bytes.reserveCapacity(utf8.count + 16)
            hex.withUTF8Buffer { digits in
                for index in first..<utf8.count {
                    let byte = utf8[index]
                    if Self.keeps(utf8, at: index, fragment: keepingFragment) {
                        bytes.append(byte)
                    } else {
                        bytes.append(UInt8(ascii: "%"))
                        bytes.append(digits[Int(byte >> 4)])
                        bytes.append(digits[Int(byte & 0xF)])
                    }
                }
            }
            return String(decoding: bytes, as: UTF8.self)
        }
    }

    /// Whether the byte at `index` stays as it is in a request target: a `%` only where it
    /// starts `%XY`.
    @inline(__always)
    private static func keeps(_ utf8: UnsafeBufferPointer<UInt8>, at index: Int, fragment: Bool) -> Bool {
        let byte = utf8[index]
        if byte == UInt8(ascii: "%") {
            return index + 2 < utf8.count && Self.isHexDigit(utf8[index + 1]) && Self.isHexDigit(utf8[index + 2])
        }
        return Self.isTargetByte(byte) || (fragment && byte == UInt8(ascii: "#"))
    }

    @inline(__always)
    static func isHexDigit(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "A")...UInt8(ascii: "F"), UInt8(ascii: "a")...UInt8(ascii: "f"):
            return true
        default: return false
        }
    }

    /// RFC 3986 §3.3–3.4: what a path or query may hold as it is — unreserved characters,
    /// sub-delimiters, `:`, `@`, `/`, `?` — and `%` (``escapeTarget(_:keepingFragment:)`` keeps one
    /// only where it starts `%XY`, so bytes already percent-encoded stay as written). Anything else (a space, a double quote, angle brackets, a backslash, braces, square
    /// brackets, a control byte, any byte of a non-ASCII character) goes encoded: a request target
    /// is ASCII (RFC 9112 §3.2), and the same text in two Unicode forms is two different byte
    /// strings to the server.
    @inline(__always)
    static func isTargetByte(_ byte: UInt8) -> Bool {
        if Self.isUnreserved(byte) { return true }
        switch byte {
        case UInt8(ascii: "!"), UInt8(ascii: "$"), UInt8(ascii: "&"), UInt8(ascii: "'"), UInt8(ascii: "("), UInt8(ascii: ")"),
            UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: ","), UInt8(ascii: ";"), UInt8(ascii: "="), UInt8(ascii: ":"),
            UInt8(ascii: "@"), UInt8(ascii: "/"), UInt8(ascii: "?"), UInt8(ascii: "%"):
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
