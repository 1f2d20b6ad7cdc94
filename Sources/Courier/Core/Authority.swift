import Foundation
import HTTPTypes

/// Where a request goes: scheme, host and port, with the scheme's default port filled in.
///
/// The one place Courier works these out (RFC 3986 §3.2, §6.2.2.1, §6.2.3; RFC 6454 §4): two
/// values are equal when they are the same origin, whatever the letter case of scheme and host
/// and whether the default port is written. The redirect stage (which fields survive a hop), the
/// OAuth2 authenticator (whose response answers a token), the cache (`Content-Location` and
/// `Location` of the same origin), the scheduler (its per-host key), the transports (the port a
/// pin or a diagnosis is for), tracing and the command line all use it.
package struct Authority: Hashable, Sendable {
    /// The scheme, lower-cased.
    package let scheme: String
    /// The host, lower-cased; an IPv6 literal without its brackets.
    package let host: String
    /// The port written, else the scheme's default; `nil` when there is neither.
    package let port: Int?

    /// 443 for `https` and `wss`, 80 for `http` and `ws`, in any letter case; `nil` otherwise.
    package static func defaultPort(scheme: String?) -> Int? {
        switch scheme?.lowercased() {
        case "https", "wss": 443
        case "http", "ws": 80
        default: nil
        }
    }

    /// The authority of a URL; `nil` without a scheme or a host.
    package init?(_ url: URL) {
        guard let scheme = url.scheme, let host = url.host, !host.isEmpty else { return nil }
        self.init(scheme: scheme, host: Substring(host), port: url.port)
    }

    /// The authority of a request: its scheme and its `host[:port]` text (an IPv6 literal in
    /// brackets); `nil` when either is missing, the host is empty or the port is not a number
    /// up to 65535.
    package init?(scheme: String?, authority: String?) {
        guard let scheme, let authority, let (host, port) = Self.split(authority), !host.isEmpty else { return nil }
        self.init(scheme: scheme, host: host, port: port)
    }

    private init(scheme: String, host: Substring, port: Int?) {
        self.scheme = scheme.lowercased()
        var bare = host
        if bare.hasPrefix("["), bare.hasSuffix("]") { bare = bare.dropFirst().dropLast() }
        self.host = bare.lowercased()
        self.port = port ?? Self.defaultPort(scheme: scheme)
    }

    /// The host and the port written in an authority text (`example.com`, `example.com:8080`,
    /// `[::1]:8080`, `[::1]`): the host as written (brackets kept), the port `nil` when none is
    /// written; `nil` for a port that is not digits with a value up to 65535 (leading zeros
    /// allowed, RFC 3986 §3.2.3), and for user information (`user@host`), which an HTTP request
    /// must not carry (RFC 9110 §4.2.4).
    package static func split(_ authority: String) -> (host: Substring, port: Int?)? {
        let text = Substring(authority)
        guard !text.utf8.contains(UInt8(ascii: "@")) else { return nil }
        let hostEnd: Substring.Index
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]") else { return nil }
            hostEnd = text.index(after: close)
        } else {
            hostEnd = text.firstIndex(of: ":") ?? text.endIndex
        }
        let host = text[..<hostEnd]
        let rest = text[hostEnd...]
        guard !rest.isEmpty else { return (host, nil) }
        guard rest.first == ":" else { return nil }
        let digits = rest.dropFirst()
        if digits.isEmpty { return (host, nil) }  // RFC 3986 §3.2.3: an empty port is no port
        guard digits.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) else { return nil }
        let significant = digits.drop { $0 == "0" }
        guard significant.utf8.count <= 5, let port = significant.isEmpty ? 0 : Int(significant), port <= 65_535 else { return nil }
        return (host, port)
    }

    /// The key a per-host limit counts requests by: the authority text with the host in lower
    /// case and without the scheme's default port (`EXAMPLE.com:443` over https is
    /// `example.com`). Made without a copy when the text is already so (the usual case): it is
    /// asked of every request.
    package static func hostKey(scheme: String?, authority: String) -> String {
        var key = Self.hasUpperCaseLetter(authority) ? authority.lowercased() : authority
        let defaultPort: StaticString? = scheme == "https" ? ":443" : scheme == "http" ? ":80" : nil
        // Compared byte by byte (an authority is ASCII text, RFC 3986 §3.2), not by character.
        if let defaultPort, key.utf8.count > defaultPort.utf8CodeUnitCount,
            defaultPort.withUTF8Buffer({ key.utf8.reversed().starts(with: $0.reversed()) })
        {
            key = String(decoding: key.utf8.dropLast(defaultPort.utf8CodeUnitCount), as: UTF8.self)
        }
        return key
    }

    /// The scheduler's per-host key (its limits, and whether the host speaks HTTP/2) for a
    /// ``hostKey(scheme:authority:)``: the key itself, except that a cleartext `http` origin on
    /// its default port keeps `:80`. `http://example.com` and `https://example.com` are two
    /// origins (RFC 6454 §4) on two ports, with connections of their own: the HTTPS one speaking
    /// HTTP/2 says nothing of the other, which must keep its HTTP/1.1 limit. (An explicit port
    /// already tells them apart: the keys of the test servers, `127.0.0.1:PORT`, are unchanged.)
    package static func slotKey(hostKey key: String, scheme: String?) -> String {
        guard scheme == "http" else { return key }
        // The port follows the last `:` that is not inside an IPv6 literal's brackets.
        let colon = key.utf8.lastIndex(of: UInt8(ascii: ":"))
        let bracket = key.utf8.lastIndex(of: UInt8(ascii: "]"))
        if let colon, bracket.map({ colon > $0 }) ?? true { return key }
        return key + ":80"
    }

    /// Whether `text` has an ASCII capital letter; read from contiguous storage when it has one.
    private static func hasUpperCaseLetter(_ text: String) -> Bool {
        let isCapital = { (byte: UInt8) in byte &- UInt8(ascii: "A") < 26 }
        return text.utf8.withContiguousStorageIfAvailable { $0.contains(where: isCapital) } ?? text.utf8.contains(where: isCapital)
    }
}

/// The status rule both transports apply to what a server sends, before anything else reads it.
package enum StatusCode {
    /// The status for `code`, or kind `transport` for a code that is no status: RFC 9110 §15
    /// makes a status code three digits, 100 to 999 (and HTTPTypes traps outside 0...999).
    package static func checked(_ code: Int) throws(CourierError) -> HTTPResponse.Status {
        guard (100...999).contains(code) else { throw CourierError.transport("the server sent a malformed status code \(code)") }
        return HTTPResponse.Status(code: code)
    }
}
