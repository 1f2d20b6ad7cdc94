import Foundation

/// Interpolation of one path segment into an endpoint's path, percent-encoded.
///
/// A value written into a path with plain interpolation goes as it is: a `/`, `?` or `#` in a
/// user's name changes which resource the request reaches (a `#` even cuts the path there, as a
/// fragment). Written with `pathSegment:`, the value is one segment:
///
///     Endpoint<User>(path: "/users/\(pathSegment: name)/profile")
///
/// Every UTF-8 byte except RFC 3986's unreserved characters (`A-Z a-z 0-9 - . _ ~`, §2.3) is
/// written as `%XY` (§2.1): `/`, `?`, `#`, `%`, `;`, `+` and spaces included, so a server cannot
/// read a value as two segments, a query, matrix parameters or an escape it already holds.
///
/// Two kinds of value no encoding can keep in place, and the caller must refuse or avoid:
/// - `.` and `..` are dot-segments, which servers remove or resolve (§5.2.4) even when
///   percent-encoded (`%2E` is `.`, §6.2.2.2). They are written `%2E` and `%2E%2E`, and a
///   path holding such a segment (relative, or an absolute URL) fails with kind
///   `invalidRequest` when the request is built, before anything is sent; so does a relative
///   path with a `..` written as it is.
/// - A value holding a `..` between slashes or backslashes (`../admin`, written
///   `..%2Fadmin`) is refused the same way: servers that decode `%2F` or take `\` for `/` before
///   resolving dot-segments would climb out of the path with it.
/// - An empty value leaves an empty segment (`/users//profile`, or `/users/` — the collection —
///   at the end of the path).
extension DefaultStringInterpolation {
    /// Appends `value`'s description as one percent-encoded path segment.
    public mutating func appendInterpolation(pathSegment value: some CustomStringConvertible) {
        self.appendLiteral(PathSegment.escape(value.description))
    }
}

/// The encoding of one path segment (see `appendInterpolation(pathSegment:)`).
enum PathSegment {
    static func escape(_ text: String) -> String {
        switch text {
        case ".": return "%2E"
        case "..": return "%2E%2E"
        default: return PercentEncoding.escape(text, keeping: PercentEncoding.isUnreserved)
        }
    }

    /// Whether `path` (up to its query) holds a `..` segment written as it is: after the base's
    /// path it climbs out of it (`/tenants/42` + `../43/data`, RFC 3986 §5.2.4), which is what a
    /// value interpolated without `pathSegment:` can make. A segment counts up to its first `;`:
    /// servers that take `;` as the start of a segment's parameters (RFC 3986 §3.3) drop them
    /// before resolving dot-segments, so `..;` climbs as `..` does.
    static func holdsDotDotSegment(_ path: String) -> Bool {
        // The common path has no `..` at all: one byte scan for a dot first.
        guard path.utf8.contains(UInt8(ascii: ".")) else { return false }
        let target = path.utf8.prefix { $0 != UInt8(ascii: "?") && $0 != UInt8(ascii: "#") }
        for segment in target.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: true) {
            let name = segment.prefix { $0 != UInt8(ascii: ";") }
            if name.count == 2 && name.allSatisfy({ $0 == UInt8(ascii: ".") }) { return true }
        }
        return false
    }

    /// Whether `path` (up to its query) holds a dot-segment written with a percent-encoded dot
    /// (`%2E`, `%2E%2E`, `.%2E`, `%2E.`, any letter case): what `pathSegment:` writes for `.` and
    /// `..`, and what servers resolve as them (RFC 3986 §6.2.2.2, §5.2.4). A segment counts up
    /// to its first `;`, as in ``holdsDotDotSegment(_:)``.
    ///
    /// A segment that holds a `..` between encoded slashes or backslashes counts too
    /// (`..%2Fadmin`, what `pathSegment:` writes for `../admin`; `%2E%2E%5Cadmin`; `..\\admin`):
    /// RFC 3986 makes `%2F` data, but servers that decode it, or take `\\` for `/`, before
    /// resolving dot-segments climb out of the path with it. (A `.` there stays where it is,
    /// and is allowed: `.%2Fconfig.json`.)
    static func holdsEncodedDotSegment(_ path: String) -> Bool {
        // The common path has no `%` and no `\\` at all: one byte scan.
        guard path.utf8.contains(where: { $0 == UInt8(ascii: "%") || $0 == UInt8(ascii: "\\") }) else { return false }
        let target = path.utf8.prefix { $0 != UInt8(ascii: "?") && $0 != UInt8(ascii: "#") }
        for whole in target.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: true) {
            let segment = whole.prefix { $0 != UInt8(ascii: ";") }
            // A dot-segment needs a dot, `.` or `%2E`: a segment without one (most encoded
            // segments: spaces, text in other scripts) is done after one scan.
            guard segment.contains(where: { $0 == UInt8(ascii: "%") || $0 == UInt8(ascii: "\\") }), Self.mayHoldADot(segment) else {
                continue
            }
            let decoded = String(decoding: segment, as: UTF8.self).uppercased()
                .replacingOccurrences(of: "%2E", with: ".")
                .replacingOccurrences(of: "%2F", with: "/")
                .replacingOccurrences(of: "%5C", with: "/")
                .replacingOccurrences(of: "\\", with: "/")
            // Whole, as written (`%2E`, `%2E%2E`, `.%2E`, `%2E.`), or a `..` between slashes.
            if decoded == "." || decoded.split(separator: "/", omittingEmptySubsequences: false).contains("..") { return true }
        }
        return false
    }

    /// Whether bytes hold a `.` or a `%2E` (any letter case).
    private static func mayHoldADot(_ bytes: some Collection<UInt8>) -> Bool {
        var previous: (UInt8, UInt8) = (0, 0)
        for byte in bytes {
            if byte == UInt8(ascii: ".") { return true }
            if previous == (UInt8(ascii: "%"), UInt8(ascii: "2")), byte == UInt8(ascii: "E") || byte == UInt8(ascii: "e") { return true }
            previous = (previous.1, byte)
        }
        return false
    }
}
