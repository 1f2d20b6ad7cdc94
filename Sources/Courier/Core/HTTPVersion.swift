/// The HTTP protocol version a response arrived over.
public struct HTTPVersion: Sendable, Hashable, CustomStringConvertible {
    /// The major version number.
    public var major: Int
    /// The minor version number.
    public var minor: Int

    /// Creates a version from its two numbers.
    public init(major: Int, minor: Int) {
        self.major = major
        self.minor = minor
    }

    /// HTTP/1.0.
    // swift-format-ignore: AlwaysUseLowerCamelCase
    public static let http1_0 = HTTPVersion(major: 1, minor: 0)
    /// HTTP/1.1.
    // swift-format-ignore: AlwaysUseLowerCamelCase
    public static let http1_1 = HTTPVersion(major: 1, minor: 1)
    /// HTTP/2.
    public static let http2 = HTTPVersion(major: 2, minor: 0)
    /// HTTP/3.
    public static let http3 = HTTPVersion(major: 3, minor: 0)
    /// A version the transport could not tell (`URLSessionTransport` over TLS, where the platform
    /// negotiates HTTP/1.1 or HTTP/2 without saying which before the body has ended).
    public static let unknown = HTTPVersion(major: 0, minor: 0)

    /// The version as written in logs, for example `HTTP/1.1`, `HTTP/2` or `HTTP/?`.
    public var description: String {
        switch (self.major, self.minor) {
        case (1, 1): return "HTTP/1.1"
        case (2, 0): return "HTTP/2"
        case (1, 0): return "HTTP/1.0"
        case (3, 0): return "HTTP/3"
        default:
            if self == .unknown { return "HTTP/?" }
            return self.major >= 2 ? "HTTP/\(self.major)" : "HTTP/\(self.major).\(self.minor)"
        }
    }
}
