import Foundation

/// The client's cookies (RFC 6265): stored from `Set-Cookie` on every response, including each
/// redirect hop and retry, and sent in `Cookie` on every request they match.
///
/// ```swift
/// let cookies = CookieJar(store: FileCookieStore(file: appSupport.appendingPathComponent("cookies.json")))
/// let client = Client(configuration: .init(transport: transport, baseURL: api) { $0.cookies = cookies })
/// cookies.removeAll()   // at sign-out
/// ```
///
/// Rules: domain and path matching (§5.1.3, §5.1.4), host-only cookies, `Expires` (the lenient
/// cookie-date algorithm of §5.1.1) and `Max-Age` (which wins), `Secure` cookies only from and to
/// `https`, `SameSite=None` only with `Secure`, `HttpOnly` kept out of ``cookies(for:)``, a newer
/// cookie replacing one with the same name, domain and path (keeping its creation time), an
/// expired one deleting it. At most 50 cookies per domain and 3,000 in all: past a limit the
/// cookie used longest ago goes first (its last-access time, §5.3: updated each time it is sent;
/// a cookie not sent since the jar was created counts from its creation), 4,096 bytes each. A `Domain` attribute must domain-match the host and contain a dot; there is no
/// public-suffix list, so `Domain=co.uk` from `a.co.uk` is accepted (documented limit). All
/// requests of an app are treated as same-site: `SameSite` is kept and reported, not enforced.
///
/// Over ``URLSessionTransport`` the platform hands over a response's `Set-Cookie` fields joined
/// with ", ", which is split again where a new `name=value` follows: a server that writes `, `
/// and a `name=` inside one cookie's value (user input echoed unencoded) makes two cookies there,
/// the field's attributes going to the second. AsyncHTTPClient keeps the fields apart;
/// prefer it where such a server sets the cookies of a session.
///
/// With ``storesResponseCookies`` off, `Set-Cookie` is ignored but the cookies the app puts in
/// the jar with ``set(_:)`` are still sent.
public final class CookieJar: Sendable {
    private struct State {
        var cookies: [Cookie] = []
        var storesResponseCookies: Bool
        /// When each cookie (by name, domain and path) was last sent (§5.4 step 3), in memory.
        var accessed: [Identity: Date] = [:]
        /// How many snapshots of the persistent cookies were made for the store.
        var version = 0
    }

    private let state: Locked<State>
    /// The version of the last snapshot the store was given.
    private let saved = Locked(0)
    private let store: (any CookieStore)?
    private let now: @Sendable () -> Date

    /// The most cookies kept for one domain, and in all.
    static let perDomainLimit = 50
    static let totalLimit = 3000

    /// Creates a jar; with a `store`, persistent cookies are loaded from it now and saved to it
    /// whenever they change (session cookies never are).
    public init(store: (any CookieStore)? = nil, storesResponseCookies: Bool = true, now: @escaping @Sendable () -> Date = { Date() }) {
        let loaded = store?.load() ?? []
        let current = now()
        let kept = loaded.filter { $0.expires != nil && !$0.isExpired(at: current) && CookieRules.isWellFormed($0) }.map {
            // Saved before lifetimes were capped: 400 days from now at the most. (Not from
            // `created`: a cookie the server renews keeps its first creation time, RFC
            // 6265 §5.3 step 11.3.)
            var cookie = $0
            cookie.expires = cookie.expires.map { min($0, current.addingTimeInterval(CookieRules.maxLifetime)) }
            return cookie
        }
        self.state = Locked(State(cookies: Self.withinLimits(kept), storesResponseCookies: storesResponseCookies))
        self.store = store
        self.now = now
    }

    /// Whether `Set-Cookie` fields of responses are stored.
    public var storesResponseCookies: Bool {
        get { self.state.withLock { $0.storesResponseCookies } }
        set { self.state.withLock { $0.storesResponseCookies = newValue } }
    }

    /// Puts a cookie in the jar (replacing one with the same name, domain and path), as if a
    /// server had set it; an expired one removes that cookie.
    ///
    /// A cookie no server could set is ignored, as a server's would be: an empty name, a name
    /// with `=`, a `;` or a control character (other than HTAB) in its name, value, domain or
    /// path, or a name and value over 4096 bytes together. An expiry more than 400 days away is
    /// set to 400 days, as for a server's (RFC 6265bis §5.6.1).
    public func set(_ cookie: Cookie) {
        guard CookieRules.isWellFormed(cookie) else { return }
        let now = self.now()
        var cookie = cookie
        cookie.expires = cookie.expires.map { min($0, now.addingTimeInterval(CookieRules.maxLifetime)) }
        self.change { cookies, accessed in Self.insert(cookie, into: &cookies, now: now, accessed: accessed) }
    }

    /// The cookies a request to `url` would carry, without the `HttpOnly` ones: what a script-like
    /// caller may see.
    public func cookies(for url: URL) -> [Cookie] {
        self.matching(url).filter { !$0.httpOnly }
    }

    /// Every cookie in the jar, `HttpOnly` ones included, for the app's own inspection (never
    /// hand this to web content).
    public var allCookies: [Cookie] {
        let now = self.now()
        return self.state.withLock { $0.cookies.filter { !$0.isExpired(at: now) } }
    }

    /// Removes every cookie (call it at sign-out), in memory and in the store.
    public func removeAll() {
        self.change(saving: true) { cookies, _ in cookies.removeAll() }
    }

    /// Removes the cookies of one domain and its subdomains.
    public func remove(domain: String) {
        let domain = Cookie.canonical(domain)
        self.change(saving: true) { cookies, _ in cookies.removeAll { CookieRules.domainMatches($0.domain, domain) } }
    }

    // MARK: - Used by the pipeline

    /// The `Cookie` field value for a request to `url`, `HttpOnly` cookies included (§5.4: longer
    /// paths first, then older ones); `nil` when none matches.
    func headerValue(for url: URL) -> String? {
        let cookies = self.matching(url)
        guard !cookies.isEmpty else { return nil }
        let now = self.now()
        self.state.withLock { state in
            for cookie in cookies { state.accessed[Self.key(cookie)] = now }
        }
        return cookies.map { "\($0.name)=\($0.value)" }.joined(separator: "; ")
    }

    /// Stores the cookies of a response to `url` (when storing is on).
    func receive(_ setCookieValues: [String], from url: URL) {
        guard !setCookieValues.isEmpty, self.storesResponseCookies, let host = url.host, !host.isEmpty else { return }
        let now = self.now()
        let secure = url.scheme?.lowercased() == "https"
        let path = Self.requestPath(of: url)
        let cookies = setCookieValues.compactMap { CookieRules.parse($0, host: host, requestPath: path, secureOrigin: secure, now: now) }
        guard !cookies.isEmpty else { return }
        self.change { stored, accessed in
            for cookie in cookies {
                // RFC 6265bis §5.7: an insecure origin may not overwrite or shadow a Secure cookie
                // of the same name whose domain and path overlap its own (session fixation).
                // An expired cookie is no longer stored (§5.3), so it shadows nothing.
                if !secure,
                    stored.contains(where: { old in
                        old.secure && !old.isExpired(at: now) && CookieRules.same(old.name, cookie.name)
                            && (CookieRules.domainMatches(old.domain, cookie.domain)
                                || CookieRules.domainMatches(cookie.domain, old.domain))
                            && CookieRules.pathMatches(cookie.path, old.path)
                    })
                {
                    continue
                }
                Self.insert(cookie, into: &stored, now: now, accessed: accessed)
            }
        }
    }

    private func matching(_ url: URL) -> [Cookie] {
        guard let host = url.host?.lowercased(), !host.isEmpty else { return [] }
        let path = Self.requestPath(of: url)
        let secure = url.scheme?.lowercased() == "https"
        let now = self.now()
        return self.state.withLock { $0.cookies }
            .filter { $0.matches(host: host, path: path, secure: secure, now: now) }
            .sorted { $0.path.utf8.count != $1.path.utf8.count ? $0.path.utf8.count > $1.path.utf8.count : $0.created < $1.created }
    }

    /// The path of `url` as the request carries it (§5.1.4 works on the request-uri's path):
    /// percent-escapes kept and a trailing `/` too, which `URL.path` would decode and drop.
    static func requestPath(of url: URL) -> String {
        let path = url.path(percentEncoded: true)
        return path.isEmpty ? "/" : path
    }

    /// Changes the cookies, then saves the persistent ones when they changed (or when `saving`,
    /// as a removal asks: the store may hold what the jar dropped on loading). The file is
    /// written outside the jar's lock, so requests reading the jar never wait for it, and never
    /// out of order: a snapshot older than one already saved is dropped (a sign-out's empty jar
    /// is never overwritten by an older one).
    private func change(saving: Bool = false, _ body: (inout [Cookie], [Identity: Date]) -> Void) {
        let hasStore = self.store != nil
        let snapshot: (version: Int, cookies: [Cookie])? = self.state.withLock { state in
            let before = hasStore ? state.cookies.filter { $0.expires != nil } : []
            body(&state.cookies, state.accessed)
            if state.accessed.count > state.cookies.count * 2 + 16 {
                let live = Set(state.cookies.map(Self.key))
                state.accessed = state.accessed.filter { live.contains($0.key) }
            }
            guard hasStore else { return nil }
            let after = state.cookies.filter { $0.expires != nil }
            // As sets: a cookie replaced by an equal one moves to the end of the list.
            guard saving || Set(after) != Set(before) else { return nil }
            state.version += 1
            return (state.version, after)
        }
        guard let snapshot, let store = self.store else { return }
        self.saved.withLock { saved in
            guard snapshot.version > saved else { return }
            store.save(snapshot.cookies)
            saved = snapshot.version
        }
    }

    /// The cookie's identity (name, domain, path) as bytes. Names and paths are compared as the
    /// server sent them (§5.3 step 11): two that differ in bytes but are canonically equivalent
    /// (which Swift's `String` equality and hashing treat as equal) are two cookies.
    static func key(_ cookie: Cookie) -> Identity {
        Identity(name: Array(cookie.name.utf8), domain: Array(cookie.domain.utf8), path: Array(cookie.path.utf8))
    }

    /// A cookie's identity as bytes (no separator a field could contain).
    struct Identity: Hashable {
        var name: [UInt8]
        var domain: [UInt8]
        var path: [UInt8]
    }

    /// `cookies` within the limits of §6.1 (a store written by another program, or by hand, may
    /// hold more): per domain and in all, Secure cookies before others (as eviction prefers,
    /// RFC 6265bis §5.8.3), then the most recently created, are kept, in their order.
    static func withinLimits(_ cookies: [Cookie]) -> [Cookie] {
        guard cookies.count > Self.perDomainLimit else { return cookies }
        var perDomain: [[UInt8]: Int] = [:]
        var kept = Set<Int>()
        let ranked = cookies.indices.sorted {
            cookies[$0].secure != cookies[$1].secure ? cookies[$0].secure : cookies[$0].created > cookies[$1].created
        }
        for index in ranked where kept.count < Self.totalLimit {
            let domain = Array(cookies[index].domain.utf8)
            guard perDomain[domain, default: 0] < Self.perDomainLimit else { continue }
            perDomain[domain, default: 0] += 1
            kept.insert(index)
        }
        return cookies.indices.filter { kept.contains($0) }.map { cookies[$0] }
    }

    /// §5.3 steps 11–12 and the limits of §6.1.
    private static func insert(_ cookie: Cookie, into cookies: inout [Cookie], now: Date, accessed: [Identity: Date]) {
        var cookie = cookie
        cookies.removeAll { $0.isExpired(at: now) }
        if let index = cookies.firstIndex(where: {
            CookieRules.same($0.name, cookie.name) && CookieRules.same($0.domain, cookie.domain) && CookieRules.same($0.path, cookie.path)
        }) {
            cookie.created = cookies[index].created
            cookies.remove(at: index)
        }
        guard !cookie.isExpired(at: now) else { return }
        cookies.append(cookie)
        // §5.3: past a limit, the cookie with the earliest last-access time goes (not the one
        // just set while another may). RFC 6265bis §5.8.3 evicts cookies that are not Secure
        // before Secure ones, the one just set included: a flood of cookies from an http
        // response cannot push a Secure session cookie out and then set its own in its place —
        // when only Secure cookies are left to evict, a cookie that is not Secure is refused.
        func lastAccess(_ index: Int) -> Date { accessed[Self.key(cookies[index])] ?? cookies[index].created }
        let newest = cookies.count - 1
        // The new cookie is the last one, also after an eviction before it has moved it.
        func evicted(from indices: [Int]) -> Int? {
            if let insecure = indices.filter({ !cookies[$0].secure }).min(by: { lastAccess($0) < lastAccess($1) }) { return insecure }
            if !cookies[cookies.count - 1].secure { return cookies.count - 1 }
            return indices.min(by: { lastAccess($0) < lastAccess($1) })
        }
        let sameDomain = cookies.indices.filter { CookieRules.same(cookies[$0].domain, cookie.domain) && $0 != newest }
        if sameDomain.count + 1 > Self.perDomainLimit, let index = evicted(from: sameDomain) {
            cookies.remove(at: index)
            if index == newest { return }
        }
        if cookies.count > Self.totalLimit, let index = evicted(from: Array(cookies.indices.dropLast())) {
            cookies.remove(at: index)
        }
    }
}

/// Where a ``CookieJar`` keeps its persistent cookies between launches.
public protocol CookieStore: Sendable {
    /// The cookies stored, or none when nothing is or it cannot be read.
    func load() -> [Cookie]
    /// Replaces what is stored with `cookies` (the persistent ones: session cookies are never passed).
    func save(_ cookies: [Cookie])
}

/// Cookies in one JSON file readable and writable by the owner only (0600), written to a
/// temporary file and renamed into place; a file that cannot be read is an empty jar.
public struct FileCookieStore: CookieStore {
    /// The file.
    public let file: URL

    /// Creates a store in `file` (created on the first save).
    public init(file: URL) {
        self.file = file
    }

    /// The cookies in the file.
    public func load() -> [Cookie] {
        guard let data = try? Data(contentsOf: self.file) else { return [] }
        return (try? JSONDecoder().decode([Cookie].self, from: data)) ?? []
    }

    /// Writes the cookies, owner-only: to a temporary file created owner-only from the start (no
    /// moment at the umask's permissions), written whole, then renamed into place; a write that
    /// fails leaves the file as it was.
    public func save(_ cookies: [Cookie]) {
        guard let data = try? JSONEncoder().encode(cookies) else { return }
        // Named after the file, so no other owner's scan for leftovers (the disk cache's) takes it.
        try? OwnerOnlyFile.write(data, to: self.file, temporaryPrefix: ".\(self.file.lastPathComponent).tmp-")
    }
}
