/// Interpolation of one path segment into an endpoint's path, percent-encoded.
///
/// A value written into a path with plain interpolation goes as it is: a `/`, `?` or `#` in a
/// user's name, or a name that is `..`, changes which resource the request reaches (a `#` even
/// cuts the path there, as a fragment). Written with `segment:`, the value is one segment and
/// nothing else:
///
///     Endpoint<User>(path: "/users/\(segment: name)/profile")
///
/// Every UTF-8 byte except RFC 3986's unreserved characters (`A-Z a-z 0-9 - . _ ~`, §2.3) is
/// written as `%XY` (§2.1): `/`, `?`, `#`, `%`, `;`, `+` and spaces included, so a server cannot
/// read a value as two segments, a query, matrix parameters or an escape it already holds.
/// A value that is `.` or `..` (a dot-segment, which servers and proxies remove or resolve,
/// §5.2.4) is written `%2E` or `%2E%2E`. An empty value stays empty: the path then holds an empty
/// segment (`/users//profile`), which the caller must refuse if the server would misread it.
extension DefaultStringInterpolation {
    /// Appends `value`'s description as one percent-encoded path segment.
    public mutating func appendInterpolation(segment value: some CustomStringConvertible) {
        self.appendLiteral(PathSegment.escape(value.description))
    }
}

/// The encoding of one path segment (see `appendInterpolation(segment:)`).
enum PathSegment {
    static func escape(_ text: String) -> String {
        switch text {
        case ".": return "%2E"
        case "..": return "%2E%2E"
        default: return PercentEncoding.escape(text, keeping: PercentEncoding.isUnreserved)
        }
    }
}
