import Foundation

/// An HTTP cookie as a user agent stores it (RFC 6265 §5.3).
public struct Cookie: Sendable, Hashable, Codable {
    /// The cookie's name.
    public var name: String
    /// The cookie's value.
    public var value: String
    /// The host (host-only cookie) or domain it is sent to, lower-cased, without a leading dot.
    public var domain: String
    /// Whether it goes to exactly ``domain`` (no `Domain` attribute) rather than its subdomains too.
    public var hostOnly: Bool
    /// The path prefix of the URLs it is sent to.
    public var path: String
    /// When it expires; `nil` for a session cookie (kept until ``CookieJar/removeAll()`` or the jar goes).
    public var expires: Date?
    /// Whether it is sent only over `https`.
    public var secure: Bool
    /// Whether scripts may not read it: kept out of ``CookieJar/cookies(for:)``.
    public var httpOnly: Bool
    /// Its `SameSite` attribute, when it has one.
    public var sameSite: SameSite?
    /// When it was first stored (kept when a newer cookie replaces it; orders the `Cookie` field).
    public var created: Date

    /// The `SameSite` attribute (RFC 6265bis §4.1.2.7).
    public enum SameSite: String, Sendable, Hashable, Codable {
        /// Sent only with same-site requests.
        case strict = "Strict"
        /// Sent with same-site requests and top-level navigations.
        case lax = "Lax"
        /// Sent with every request; requires `Secure`.
        case none = "None"
    }

    /// Creates a cookie; a `domain` is lower-cased and loses a leading dot.
    public init(
        name: String, value: String, domain: String, hostOnly: Bool = true, path: String = "/", expires: Date? = nil,
        secure: Bool = false, httpOnly: Bool = false, sameSite: SameSite? = nil, created: Date = Date()
    ) {
        self.name = name
        self.value = value
        self.domain = Self.canonical(domain)
        self.hostOnly = hostOnly
        self.path = path.hasPrefix("/") ? path : "/"
        self.expires = expires
        self.secure = secure
        self.httpOnly = httpOnly
        self.sameSite = sameSite
        self.created = created
    }

    /// Whether two cookies are the same, field by field, with the text fields compared as bytes
    /// (RFC 6265 §5.3 step 11: names are octets): two names that differ in bytes are two cookies
    /// even when Swift's `String` equality calls them equal (canonical equivalence), as in the jar.
    public static func == (lhs: Cookie, rhs: Cookie) -> Bool {
        CookieRules.same(lhs.name, rhs.name) && CookieRules.same(lhs.value, rhs.value)
            && CookieRules.same(lhs.domain, rhs.domain) && CookieRules.same(lhs.path, rhs.path)
            && lhs.hostOnly == rhs.hostOnly && lhs.expires == rhs.expires && lhs.secure == rhs.secure
            && lhs.httpOnly == rhs.httpOnly && lhs.sameSite == rhs.sameSite && lhs.created == rhs.created
    }

    /// Hashes the fields `==` compares, the text ones as bytes.
    public func hash(into hasher: inout Hasher) {
        func combine(_ text: String) {
            hasher.combine(text.utf8.count)
            for byte in text.utf8 { hasher.combine(byte) }
        }
        combine(self.name)
        combine(self.value)
        combine(self.domain)
        combine(self.path)
        hasher.combine(self.hostOnly)
        hasher.combine(self.expires)
        hasher.combine(self.secure)
        hasher.combine(self.httpOnly)
        hasher.combine(self.sameSite)
        hasher.combine(self.created)
    }

    static func canonical(_ domain: String) -> String {
        var domain = domain.lowercased()
        while domain.hasPrefix(".") { domain.removeFirst() }
        return domain
    }

    /// Whether the cookie has expired at `now`.
    func isExpired(at now: Date) -> Bool {
        self.expires.map { $0 <= now } ?? false
    }

    /// Whether the cookie goes with a request to `url` (RFC 6265 §5.4): domain, path and `Secure`
    /// match, and it has not expired.
    func matches(host: String, path: String, secure: Bool, now: Date) -> Bool {
        guard !self.isExpired(at: now), !self.secure || secure else { return false }
        let domainMatches = self.hostOnly ? host == self.domain : CookieRules.domainMatches(host, self.domain)
        return domainMatches && CookieRules.pathMatches(path, self.path)
    }
}

/// The rules of RFC 6265 §5 as pure functions: parsing `Set-Cookie`, dates, domain and path matching.
package enum CookieRules {
    /// The longest name and value together (RFC 6265bis §5.6: longer is ignored; RFC 6265 §6.1
    /// asks for at least 4096 bytes).
    static let maxCookieBytes = 4096
    /// The longest attribute value read (RFC 6265bis §5.6: a longer one is ignored).
    static let maxAttributeBytes = 1024
    /// The longest `Set-Cookie` value parsed at all: a name and value at their limit with a
    /// dozen attributes at theirs; anything longer is no cookie a server meant.
    static let maxHeaderBytes = 16 * 1024
    /// The longest a cookie lives: RFC 6265bis §5.6.1 and §5.6.2 cap `Expires` and `Max-Age` at
    /// 400 days from when the cookie is received.
    static let maxLifetime: TimeInterval = 400 * 24 * 60 * 60

    /// The cookie a `Set-Cookie` value makes for a response to `url` (host, path, scheme), or `nil`
    /// when the user agent must ignore it (§5.2, §5.3 and the `Secure`/`SameSite=None` rules of RFC 6265bis).
    package static func parse(_ header: String, host: String, requestPath: String, secureOrigin: Bool, now: Date) -> Cookie? {
        // RFC 6265bis §5.6 step 1: a control character other than HTAB anywhere (in an
        // attribute too) makes the whole string ignored.
        guard header.utf8.count <= Self.maxHeaderBytes, !Self.hasControlCharacters(header) else { return nil }
        // Split on the bytes `;` and `=` (RFC 6265 §5.2), never on characters: a `;` followed by
        // a combining mark is one Swift character, and splitting on characters kept it, and
        // the attribute after it, inside the value (found by fuzzing). An ASCII byte never
        // occurs inside a multi-byte UTF-8 sequence, so every piece is valid text.
        let parts = FieldText.split(header, at: ";")
        guard let pair = parts.first, let equals = pair.utf8.firstIndex(of: UInt8(ascii: "=")) else { return nil }
        let name = FieldText.trimmed(String(decoding: pair.utf8[..<equals], as: UTF8.self))
        let value = FieldText.trimmed(String(decoding: pair.utf8[pair.utf8.index(after: equals)...], as: UTF8.self))
        guard !name.isEmpty, name.utf8.count + value.utf8.count <= Self.maxCookieBytes else { return nil }

        var expires: Date?
        var maxAge: Date?
        var domain: String?
        var path: String?
        var secure = false
        var httpOnly = false
        var sameSite: Cookie.SameSite?
        for attribute in parts.dropFirst() {
            let pieces = FieldText.split(attribute, at: "=", maxSplits: 1)
            let key = FieldText.trimmed(pieces[0]).lowercased()
            let text = pieces.count == 2 ? FieldText.trimmed(pieces[1]) : ""
            // RFC 6265bis §5.6: an attribute value over 1024 bytes is ignored (the attribute).
            guard text.utf8.count <= Self.maxAttributeBytes else { continue }
            switch key {
            case "expires":
                if let date = Self.cookieDate(text) { expires = date }
            case "max-age":
                // §5.2.2: an optional "-" and digits; zero or less expires at once.
                let negative = text.hasPrefix("-")
                guard let seconds = UntrustedNumber.digits(negative ? text.dropFirst() : Substring(text), limit: Int(Int32.max)) else {
                    continue
                }
                maxAge = negative || seconds == 0 ? .distantPast : now.addingTimeInterval(TimeInterval(seconds))
            case "domain":
                // §5.2.3: one leading "." is ignored (only one: `..example.com` stays a domain
                // no host matches), and the rest is lower-cased.
                if !text.isEmpty { domain = (text.hasPrefix(".") ? String(text.dropFirst()) : text).lowercased() }
            case "path":
                // §5.2.4: a value that does not start with "/" means the default path; the last
                // Path attribute wins (§5.3 step 7), so it also replaces an earlier valid one.
                path = text.hasPrefix("/") ? text : Self.defaultPath(requestPath)
            case "secure":
                secure = true
            case "httponly":
                httpOnly = true
            case "samesite":
                switch text.lowercased() {
                case "strict": sameSite = .strict
                case "lax": sameSite = .lax
                case "none": sameSite = SameSite.none
                default: sameSite = .lax  // RFC 6265bis: an unknown value is "Lax"-like; keep it bounded
                }
            default:
                continue  // unknown attributes are ignored (§5.2)
            }
        }
        // RFC 6265bis §5.7: a Secure cookie only from a secure origin; SameSite=None needs Secure.
        if secure, !secureOrigin { return nil }
        if sameSite == SameSite.none, !secure { return nil }
        let host = host.lowercased()
        var hostOnly = true
        var cookieDomain = host
        if let domain, !domain.isEmpty {
            // §5.3 step 6: the request host must domain-match; a bare name without a dot (a
            // top-level domain) is never a cookie domain unless it is the host itself.
            guard Self.domainMatches(host, domain) else { return nil }
            if domain != host {
                // The dot must separate labels: `com.` (a fully qualified top-level domain) is
                // as much a public suffix as `com`.
                guard Self.hasInnerDot(domain), !Self.isIPAddress(host) else { return nil }
            }
            hostOnly = false
            cookieDomain = domain
        }
        // RFC 6265bis §4.1.3 and §5.7: a name's prefix is a promise the server cannot break.
        // `__Secure-` only on a Secure cookie; `__Host-` only on a Secure, host-only cookie whose
        // Path is `/`. Compared without regard to case, as the draft asks.
        if Self.hasPrefix(name, "__secure-"), !secure { return nil }
        if Self.hasPrefix(name, "__host-"), !secure || !hostOnly || path != "/" { return nil }
        // RFC 6265bis §5.6.1, §5.6.2: an expiry more than 400 days away is set to 400 days.
        let expiry = (maxAge ?? expires).map { min($0, now.addingTimeInterval(Self.maxLifetime)) }
        return Cookie(
            name: name, value: value, domain: cookieDomain, hostOnly: hostOnly, path: path ?? Self.defaultPath(requestPath),
            expires: expiry, secure: secure, httpOnly: httpOnly, sameSite: sameSite, created: now
        )
    }

    typealias SameSite = Cookie.SameSite

    /// Whether `name` starts with `prefix` (lower-case ASCII), in any case.
    static func hasPrefix(_ name: String, _ prefix: String) -> Bool {
        let bytes = name.utf8
        guard bytes.count >= prefix.utf8.count else { return false }
        return zip(bytes, prefix.utf8).allSatisfy { byte, expected in
            (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") ? byte | 0x20 : byte) == expected
        }
    }

    /// Whether `domain` has a dot between two labels (not only trailing dots).
    static func hasInnerDot(_ domain: String) -> Bool {
        var trimmed = domain.utf8[...]
        while trimmed.last == UInt8(ascii: ".") { trimmed = trimmed.dropLast() }
        return trimmed.contains(UInt8(ascii: "."))
    }

    /// Whether `cookie` is one a server could have set: a name that is not empty, with no `=`,
    /// neither name nor value holding a `;` or a control character other than HTAB (which
    /// would end or split the `Cookie` field a request carries), a name and value within 4096
    /// bytes together, and no control character in the domain or path. (A path may hold a `;`
    /// and be long: the default path of `/app;jsessionid=X/login` is `/app;jsessionid=X`, and
    /// neither goes into the `Cookie` field.) What an app hands the jar, or a store loads, is
    /// held to the same rules as what a server sends; every cookie
    /// ``parse(_:host:requestPath:secureOrigin:now:)`` makes passes.
    package static func isWellFormed(_ cookie: Cookie) -> Bool {
        let name = cookie.name.utf8
        let value = cookie.value.utf8
        let semicolon = UInt8(ascii: ";")
        return !name.isEmpty && name.count + value.count <= Self.maxCookieBytes
            && !name.contains(UInt8(ascii: "=")) && !name.contains(semicolon) && !value.contains(semicolon)
            && !Self.hasControlCharacters(cookie.name) && !Self.hasControlCharacters(cookie.value)
            && !Self.hasControlCharacters(cookie.domain) && !Self.hasControlCharacters(cookie.path)
    }

    /// Whether `text` has a control character other than HTAB (%x00-08, %x0A-1F, %x7F).
    private static func hasControlCharacters(_ text: String) -> Bool {
        text.utf8.contains { ($0 < 0x20 && $0 != 0x09) || $0 == 0x7F }
    }

    /// §5.1.3: the host equals the domain, or ends with "." + domain and is not an IP address.
    package static func domainMatches(_ host: String, _ domain: String) -> Bool {
        let host = host.lowercased()
        let domain = domain.lowercased()
        if host == domain { return true }
        return host.hasSuffix("." + domain) && !Self.isIPAddress(host)
    }

    static func isIPAddress(_ host: String) -> Bool {
        host.contains(":") || (!host.isEmpty && host.allSatisfy { $0.isNumber || $0 == "." })
    }

    /// Whether two names, values, domains or paths are the same bytes (§5.3 step 11: as sent; Swift's
    /// `String` equality also calls canonically equivalent texts equal).
    package static func same(_ a: String, _ b: String) -> Bool {
        a.utf8.elementsEqual(b.utf8)
    }

    /// §5.1.4: the request path equals the cookie path, or starts with it at a `/` boundary.
    /// Paths are compared as bytes, as sent: canonically equivalent paths that differ in bytes
    /// (which `String` comparison treats as equal) do not match.
    package static func pathMatches(_ requestPath: String, _ cookiePath: String) -> Bool {
        let request = requestPath.utf8
        let cookie = cookiePath.utf8
        if request.elementsEqual(cookie) { return true }
        guard request.starts(with: cookie) else { return false }
        let slash = UInt8(ascii: "/")
        return cookie.last == slash || request.dropFirst(cookie.count).first == slash
    }

    /// §5.1.4: the directory of the request path (`/a/b/c` → `/a/b`), or `/`.
    package static func defaultPath(_ requestPath: String) -> String {
        guard requestPath.hasPrefix("/"), let slash = requestPath.lastIndex(of: "/"), slash != requestPath.startIndex else { return "/" }
        return String(requestPath[..<slash])
    }

    /// The cookie-date algorithm of §5.1.1: tokens in any order, lenient as servers are, with the
    /// year fixed up (70–99 → 19xx, 0–69 → 20xx); `nil` for anything it does not accept.
    package static func cookieDate(_ text: String) -> Date? {
        let delimiters = CharacterSet(charactersIn: "\t !\"#$%&'()*+,-./;<=>?@[\\]^_`{|}~")
        var time: (Int, Int, Int)?
        var day: Int?
        var month: Int?
        var year: Int?
        let months = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
        for token in text.components(separatedBy: delimiters) where !token.isEmpty {
            if time == nil, let parsed = Self.time(token) {
                time = parsed
            } else if day == nil, let value = Self.leadingDigits(token, min: 1, max: 2) {
                day = value
            } else if month == nil, token.count >= 3, let index = months.firstIndex(of: token.prefix(3).lowercased()) {
                month = index + 1
            } else if year == nil, let value = Self.leadingDigits(token, min: 2, max: 4) {
                year = value
            }
        }
        guard let (hour, minute, second) = time, let day, let month, var year else { return nil }
        if (70...99).contains(year) { year += 1900 } else if (0...69).contains(year) { year += 2000 }
        guard (1...31).contains(day), year >= 1601, hour <= 23, minute <= 59, second <= 59 else { return nil }
        var components = DateComponents()
        components.calendar = Calendar(identifier: .gregorian)
        components.timeZone = TimeZone(identifier: "GMT")
        (components.year, components.month, components.day) = (year, month, day)
        (components.hour, components.minute, components.second) = (hour, minute, second)
        guard components.isValidDate, let date = components.date else { return nil }
        return date
    }

    /// `h:m:s` with one or two digits each (§5.1.1 hms-time), anything after the seconds ignored
    /// (`10:18:14:00` is 10:18:14: the time production allows any octets after a non-digit).
    private static func time(_ token: String) -> (Int, Int, Int)? {
        let fields = token.split(separator: ":", omittingEmptySubsequences: false)
        guard fields.count >= 3, let hour = Self.leadingDigits(String(fields[0]), min: 1, max: 2, whole: true),
            let minute = Self.leadingDigits(String(fields[1]), min: 1, max: 2, whole: true),
            let second = Self.leadingDigits(String(fields[2]), min: 1, max: 2)
        else { return nil }
        return (hour, minute, second)
    }

    /// The 1…`max` digits a token starts with (at least `min`); with `whole`, nothing may follow them.
    private static func leadingDigits(_ token: String, min: Int, max: Int, whole: Bool = false) -> Int? {
        let digits = token.prefix { $0.isASCII && $0.isNumber }
        guard digits.count >= min, digits.count <= max else { return nil }
        if whole, digits.count != token.count { return nil }
        if !whole, digits.count < token.count, token[digits.endIndex].isASCII, token[digits.endIndex].isNumber { return nil }
        return Int(digits)
    }
}
