import Foundation

/// An OAuth 2.0 token set (RFC 6749 §5.1).
public struct OAuth2Token: Codable, Sendable, Equatable {
    /// The access token sent as a bearer credential (RFC 6750).
    public var accessToken: String
    /// The token type, usually `Bearer`.
    public var tokenType: String
    /// The refresh token, when the server issued one.
    public var refreshToken: String?
    /// When the access token expires, when the server said.
    public var expiresAt: Date?
    /// The granted scope.
    public var scope: String?

    /// Creates a token set.
    public init(
        accessToken: String, tokenType: String = "Bearer", refreshToken: String? = nil, expiresAt: Date? = nil, scope: String? = nil
    ) {
        self.accessToken = accessToken
        self.tokenType = tokenType
        self.refreshToken = refreshToken
        self.expiresAt = expiresAt
        self.scope = scope
    }

    /// Whether the access token expires within `margin` of now.
    public func expires(within margin: Duration, now: Date = Date()) -> Bool {
        guard let expiresAt else { return false }
        return expiresAt.timeIntervalSince(now) <= margin.inSeconds
    }
}

/// Where OAuth 2.0 credentials are kept between launches.
///
/// Courier ships an in-memory store and a file store readable only by the owner; a Keychain store
/// for Apple platforms can conform to the same protocol.
public protocol CredentialStore: Sendable {
    /// The stored token set, if any.
    func load() throws -> OAuth2Token?
    /// Replaces the stored token set; `nil` deletes it.
    func save(_ token: OAuth2Token?) throws
}

/// Keeps credentials in memory only.
public final class InMemoryCredentialStore: CredentialStore {
    private let token: Locked<OAuth2Token?>

    /// Creates a store holding `token`.
    public init(_ token: OAuth2Token? = nil) { self.token = Locked(token) }

    /// The stored token set.
    public func load() throws -> OAuth2Token? { self.token.current }

    /// Replaces the stored token set.
    public func save(_ token: OAuth2Token?) throws { self.token.withLock { $0 = token } }
}

/// Keeps credentials in a JSON file that only its owner can read or write (mode 0600).
///
/// The file is written to a temporary file created with mode 0600 and then renamed over the old
/// one, so it is never readable by others and never half-written.
public struct FileCredentialStore: CredentialStore {
    /// The file's location.
    public let url: URL

    /// Creates a store at `url`.
    public init(url: URL) { self.url = url }

    /// The stored token set; a missing file means none.
    public func load() throws -> OAuth2Token? {
        guard FileManager.default.fileExists(atPath: self.url.path) else { return nil }
        let data = try Data(contentsOf: self.url)
        return try JSONDecoder().decode(OAuth2Token.self, from: data)
    }

    /// Writes the token set (owner-only), or deletes the file for `nil`.
    public func save(_ token: OAuth2Token?) throws {
        guard let token else {
            if FileManager.default.fileExists(atPath: self.url.path) { try FileManager.default.removeItem(at: self.url) }
            return
        }
        let data = try JSONEncoder().encode(token)
        try OwnerOnlyFile.write(data, to: self.url, durable: true)
    }
}

/// A parsed `WWW-Authenticate` challenge (RFC 9110 §11.6.1, RFC 6750 §3).
public struct AuthenticationChallenge: Sendable, Equatable {
    /// The scheme, lower-cased (`bearer`, `basic`, …); schemes are case-insensitive.
    public var scheme: String
    /// The auth-params, with lower-cased names.
    public var parameters: [String: String]

    /// Creates a challenge.
    public init(scheme: String, parameters: [String: String]) {
        self.scheme = scheme.lowercased()
        self.parameters = parameters
    }

    /// Where a token68 that starts after the spaces at `start` ends (just past it), when one is
    /// there: token68 characters, then any `=`, then the end of the value or a comma.
    private static func token68End(in value: String, from start: String.Index) -> String.Index? {
        var index = start
        while index < value.endIndex, value[index] == " " { index = value.index(after: index) }
        let first = index
        while index < value.endIndex, let scalar = value[index].unicodeScalars.first, value[index].unicodeScalars.count == 1,
            scalar.isASCII, CharacterSet.alphanumerics.contains(scalar) || "-._~+/".unicodeScalars.contains(scalar)
        {
            index = value.index(after: index)
        }
        guard index > first else { return nil }
        while index < value.endIndex, value[index] == "=" { index = value.index(after: index) }
        var after = index
        while after < value.endIndex, value[after] == " " { after = value.index(after: after) }
        guard after == value.endIndex || value[after] == "," else { return nil }
        // `realm=x` is an auth-param, not a token68 followed by a stray value: a token68's `=`
        // come only at its end, so what follows them must be the end or a comma (checked above),
        // and a name followed by one `=` and a value never gets here.
        return index
    }

    /// Parses the challenges of a `WWW-Authenticate` value.
    public static func parse(_ value: String) -> [AuthenticationChallenge] {
        var challenges: [AuthenticationChallenge] = []
        var index = value.startIndex
        func skipSpaces() { while index < value.endIndex, value[index] == " " || value[index] == "," { index = value.index(after: index) } }
        func token() -> String {
            let start = index
            while index < value.endIndex, !" =,\"".contains(value[index]) { index = value.index(after: index) }
            return String(value[start..<index])
        }
        while true {
            skipSpaces()
            guard index < value.endIndex else { break }
            let scheme = token().lowercased()
            guard !scheme.isEmpty else { break }
            var parameters: [String: String] = [:]
            // RFC 9110 §11.2: a challenge carries a token68 (`Negotiate YIIB==`) or auth-params.
            // A token68 ends the challenge; it is no parameter, and the one after it is not lost.
            if let end = Self.token68End(in: value, from: index) {
                index = end
                challenges.append(AuthenticationChallenge(scheme: scheme, parameters: [:]))
                continue
            }
            while true {
                while index < value.endIndex, value[index] == " " { index = value.index(after: index) }
                let save = index
                let name = token()
                // RFC 9110 §11.2: `name = value`, with optional white space (BWS) around `=`.
                while index < value.endIndex, value[index] == " " || value[index] == "\t" { index = value.index(after: index) }
                guard !name.isEmpty, index < value.endIndex, value[index] == "=" else {
                    index = save
                    break
                }
                index = value.index(after: index)
                while index < value.endIndex, value[index] == " " || value[index] == "\t" { index = value.index(after: index) }
                var parameterValue = ""
                if index < value.endIndex, value[index] == "\"" {
                    index = value.index(after: index)
                    while index < value.endIndex, value[index] != "\"" {
                        if value[index] == "\\", value.index(after: index) < value.endIndex { index = value.index(after: index) }
                        parameterValue.append(value[index])
                        index = value.index(after: index)
                    }
                    if index < value.endIndex { index = value.index(after: index) }
                } else {
                    parameterValue = token()
                }
                parameters[name.lowercased()] = parameterValue
                while index < value.endIndex, value[index] == " " { index = value.index(after: index) }
                if index < value.endIndex, value[index] == "," { index = value.index(after: index) } else { break }
            }
            challenges.append(AuthenticationChallenge(scheme: scheme, parameters: parameters))
        }
        return challenges
    }
}
