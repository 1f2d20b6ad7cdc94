import CourierTestServer
import Foundation
import HTTPTypes
import Testing

@testable import Courier

/// RFC 6265's rules, one by one, as pure functions (each test names its section).
@Suite("Cookies: the rules of RFC 6265")
struct CookieRulesTests {
    static let now = Date(timeIntervalSince1970: 1_800_000_000)

    static func parse(_ header: String, host: String = "www.example.com", path: String = "/a/b/c", secure: Bool = true) -> Cookie? {
        CookieRules.parse(header, host: host, requestPath: path, secureOrigin: secure, now: Self.now)
    }

    @Test
    func aSemicolonFollowedByACombiningMarkStillEndsTheValue() throws {
        // §5.2: the value ends at the first %x3B byte. A `;` followed by a combining mark is one
        // Swift character; splitting on characters kept `;\u{DD1}Domain=…` inside the value
        // (found by fuzzing: Fuzz/corpus/cookie/semicolon-then-combining-mark).
        let cookie = try #require(Self.parse("x=y;\u{DD1}~?!y; Path=/p;\u{301}Secure"))
        #expect(cookie.name == "x")
        #expect(cookie.value == "y")
        #expect(!cookie.value.contains(";"))
        #expect(cookie.path == "/p")
        #expect(!cookie.secure)  // "\u{301}Secure" is an unknown attribute, not Secure
    }

    @Test
    func aGreekQuestionMarkInANameIsKeptAndIsNoSeparator() throws {
        // §5.2: the pair ends at the %x3B byte, and only there. U+037E (GREEK QUESTION MARK) is
        // canonically equivalent to ";", so Swift's `contains(";")` finds one in the name; its
        // bytes (CD BE) are no separator and go back on the wire unchanged (found by fuzzing:
        // Fuzz/corpus/cookie/greek-question-mark-in-name).
        let cookie = try #require(Self.parse("m\u{37E}idid=a3fa; Expires=f=a3fWe"))
        #expect(Array(cookie.name.utf8) == Array("m\u{37E}idid".utf8))
        #expect(!cookie.name.utf8.contains(UInt8(ascii: ";")))
        #expect(cookie.value == "a3fa")
        #expect(cookie.expires == nil)  // "f=a3fWe" is no date: the attribute is ignored
    }

    @Test(arguments: [
        ("__Secure-a=1", false),  // no Secure flag
        ("__secure-a=1; Path=/", false),  // the prefix in any case
        ("__Secure-a=1; Secure", true),
        ("__Host-a=1; Secure; Path=/", true),
        ("__HOST-a=1; Secure; Path=/", true),
        ("__Host-a=1; Path=/", false),  // not Secure
        ("__Host-a=1; Secure", false),  // no Path attribute
        ("__Host-a=1; Secure; Path=/x", false),  // a Path other than /
        ("__Host-a=1; Secure; Path=/; Domain=example.com", false),  // not host-only
        ("__Host-a=1; Secure; Path=/; Domain=www.example.com", false),  // a Domain, even the host's own
        ("__Hostile=1", true),  // no prefix: `__Host` without the dash
    ])
    func aNamesPrefixIsAPromiseTheCookieMustKeep(_ header: String, accepted: Bool) {
        // RFC 6265bis §4.1.3 (and §5.7, steps for "__Secure-" and "__Host-").
        #expect((Self.parse(header) != nil) == accepted)
    }

    @Test
    func aNameValuePairAndItsAttributes() throws {
        // §5.2: name=value, then attributes in any case; unknown ones ignored.
        let cookie = try #require(Self.parse("sid=abc 123; Path=/; SECURE; HttpOnly; SameSite=Strict; Flavour=chocolate"))
        #expect(cookie.name == "sid")
        #expect(cookie.value == "abc 123")
        #expect(cookie.path == "/")
        #expect(cookie.secure && cookie.httpOnly)
        #expect(cookie.sameSite == .strict)
        #expect(cookie.hostOnly)
        #expect(cookie.domain == "www.example.com")
        #expect(cookie.expires == nil)
    }

    @Test(arguments: [
        ("a=1; Max-Age=60; Expires=Wed, 09 Jun 2021 10:18:14 GMT", 60.0),  // §5.3 step 3: Max-Age wins
        ("a=1; Expires=Wed, 09 Jun 2021 10:18:14 GMT; Max-Age=60", 60.0),
        ("a=1; Max-Age=99999999999999999999", 400 * 86_400.0),  // saturates, no trap, then the cap below
    ])
    func maxAgeWinsOverExpires(_ header: String, _ seconds: Double) throws {
        let cookie = try #require(Self.parse(header))
        #expect(cookie.expires == Self.now.addingTimeInterval(seconds))
    }

    @Test(arguments: [
        ("a=1; Max-Age=34560001", 400 * 86_400.0),
        ("a=1; Max-Age=34559999", 34_559_999.0),
        ("a=1; Expires=Fri, 01 Jan 2100 00:00:00 GMT", 400 * 86_400.0),
        ("a=1; Expires=Wed, 09 Jun 2100 10:18:14 GMT; Max-Age=999999999", 400 * 86_400.0),
    ])
    func aLifetimeOverFourHundredDaysIsCutToFourHundredDays(_ header: String, _ seconds: Double) throws {
        // RFC 6265bis §5.6.1 (Expires) and §5.6.2 (Max-Age): the expiry is at most the cookie age
        // limit, 400 days, from now.
        let cookie = try #require(Self.parse(header))
        #expect(cookie.expires == Self.now.addingTimeInterval(seconds))
    }

    @Test(arguments: [
        ("sid=1; Max-Age=3600", "/app;jsessionid=X/login"),  // servlet URL rewriting: a `;` in the default path
        ("sid=1", "/" + String(repeating: "p", count: 2000) + "/x"),  // a default path past 1024 bytes
        ("sid=a b \"c\" =d é", "/"),
    ])
    func everyCookieAServerSetsIsOneTheJarAndItsStoreKeep(_ header: String, _ path: String) throws {
        // What parse makes passes the rule set() and a store's load apply: such a cookie used to
        // work for one run and vanish at the next launch.
        let cookie = try #require(Self.parse(header, path: path))
        #expect(CookieRules.isWellFormed(cookie))
        let directory = temporaryDirectory("cookies")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = FileCookieStore(file: directory.appendingPathComponent("cookies.json"))
        var lasting = cookie
        lasting.expires = Date().addingTimeInterval(3600)
        store.save([lasting])
        #expect(CookieJar(store: store).allCookies.map(\.name) == ["sid"])
    }

    /// A cookie store that counts its saves and keeps what it was given last.
    final class CountingCookieStore: CookieStore {
        private let state = Locked<(saves: Int, last: [Cookie])>((0, []))
        var saves: Int { self.state.withLock { $0.saves } }
        var last: [Cookie] { self.state.withLock { $0.last } }
        func load() -> [Cookie] { [] }
        func save(_ cookies: [Cookie]) { self.state.withLock { $0 = ($0.saves + 1, cookies) } }
    }

    @Test
    func theStoreIsWrittenWhenThePersistentCookiesChangeAndOnlyThen() {
        // A session cookie, a refused one, or one that changed nothing wrote the whole file (up to
        // 3000 cookies) for each response, with every request waiting for the jar. (A cookie
        // renewed with a new expiry is a change, and is written.)
        let store = CountingCookieStore()
        let jar = CookieJar(store: store, now: { Self.now })
        let url = URL(string: "https://api.example.com/")!
        jar.receive(["session=1; Path=/"], from: url)
        #expect(store.saves == 0)  // session cookies are never stored
        jar.receive(["lasting=1; Path=/; Max-Age=3600"], from: url)
        #expect(store.saves == 1)
        #expect(store.last.map(\.value) == ["1"])
        jar.receive(["lasting=1; Path=/; Max-Age=3600"], from: url)
        #expect(store.saves == 1)  // the same cookie at the same time: nothing changed
        // An http origin may not shadow a Secure cookie (RFC 6265bis §5.7): refused, not written.
        jar.receive(["guarded=1; Path=/; Max-Age=3600; Secure"], from: url)
        #expect(store.saves == 2)
        jar.receive(["guarded=2; Path=/; Max-Age=3600"], from: URL(string: "http://api.example.com/")!)
        #expect(store.saves == 2)
        // The same cookie again, now not the last in the jar: still nothing changed.
        jar.receive(["lasting=1; Path=/; Max-Age=3600"], from: url)
        #expect(store.saves == 2)
        jar.receive(["lasting=2; Path=/; Max-Age=3600"], from: url)
        #expect(store.saves == 3)
        #expect(Set(store.last.map(\.value)) == ["2", "1"])
        // A removal is always written, even of nothing the jar holds: the store may hold more.
        jar.remove(domain: "other.example")
        #expect(store.saves == 4)
        jar.removeAll()
        #expect(store.saves == 5)
        #expect(store.last.isEmpty)
    }

    @Test(arguments: ["a=1; Max-Age=0", "a=1; Max-Age=-5", "a=1; Expires=Thu, 01 Jan 1970 00:00:00 GMT"])
    func zeroOrNegativeMaxAgeAndPastExpiresExpireAtOnce(_ header: String) throws {
        // §5.2.2: delta-seconds ≤ 0 means the earliest representable time.
        let cookie = try #require(Self.parse(header))
        #expect(try #require(cookie.expires) <= Self.now)
    }

    @Test(arguments: ["a=1; Max-Age=1e9", "a=1; Max-Age=", "a=1; Max-Age=ten", "a=1; Expires=not a date"])
    func anInvalidLifetimeIsIgnoredNotATrap(_ header: String) throws {
        let cookie = try #require(Self.parse(header))
        #expect(cookie.expires == nil)
    }

    @Test(arguments: [
        ("Sun, 06 Nov 1994 08:49:37 GMT", 784_111_777.0),
        ("Sunday, 06-Nov-94 08:49:37 GMT", 784_111_777.0),
        ("Sun Nov  6 08:49:37 1994", 784_111_777.0),
        ("06 Nov 1994 8:49:37", 784_111_777.0),  // the algorithm takes tokens in any order
        ("Wed, 09 Jun 2021 10:18:14 GMT", 1_623_233_894.0),
        ("Wed, 09 Jun 2021 10:18:14:00 GMT", 1_623_233_894.0),  // time = hms-time ( non-digit *OCTET )
    ])
    func theCookieDateAlgorithmReadsWhatServersSend(_ text: String, _ seconds: Double) {
        // §5.1.1: lenient on purpose (cookies predate strict HTTP dates), years 70–99 are 19xx.
        #expect(CookieRules.cookieDate(text) == Date(timeIntervalSince1970: seconds))
    }

    @Test(arguments: [
        "", "31 Feb 2021 10:00:00", "06 Nov 1994 25:00:00", "06 Nov 1500 08:00:00", "06 Nov 99999999999 08:00:00", "08:49:37",
    ])
    func anImpossibleCookieDateIsNoDate(_ text: String) {
        #expect(CookieRules.cookieDate(text) == nil)
    }

    @Test
    func domainAttributesMustCoverTheHost() throws {
        // §5.3 step 6 and §5.1.3.
        let parent = try #require(Self.parse("a=1; Domain=.Example.COM"))
        #expect(parent.domain == "example.com")
        #expect(!parent.hostOnly)
        #expect(Self.parse("a=1; Domain=other.com") == nil)
        #expect(Self.parse("a=1; Domain=com") == nil)  // a top-level domain
        #expect(Self.parse("a=1; Domain=0.0.1", host: "127.0.0.1") == nil)  // an IP address has no parent
        #expect(try #require(Self.parse("a=1; Domain=127.0.0.1", host: "127.0.0.1")).hostOnly == false)
        // A fully qualified top-level domain is still one: `com.` would reach every `*.com.` host.
        #expect(Self.parse("a=1; Domain=com.", host: "www.example.com.") == nil)
        #expect(try #require(Self.parse("a=1; Domain=example.com.", host: "www.example.com.")).domain == "example.com.")
        // §5.2.3: only one leading dot is ignored; `.example.com` is not a domain of the host.
        #expect(Self.parse("a=1; Domain=..example.com") == nil)
    }

    @Test
    func onlySpacesAndTabsAreTrimmed() throws {
        // §5.2: names, values and attributes lose WSP (SP and HTAB) at their ends, nothing else.
        // A no-break space before `Domain` makes an unknown attribute: the cookie stays host-only.
        #expect(try #require(Self.parse("a=1;\u{A0}Domain=example.com")).hostOnly)
        #expect(try #require(Self.parse("a=\u{A0}x\u{3000}")).value == "\u{A0}x\u{3000}")
        #expect(try #require(Self.parse(" \t a \t= \t1 \t; \tDomain=example.com")).hostOnly == false)
        #expect(try #require(Self.parse(" \t a \t= \t1 \t")).name == "a")
    }

    @Test
    func theRequestPathIsTakenAsSentWithItsTrailingSlashAndEscapes() throws {
        // §5.1.4 works on the request-uri's path: a trailing "/" and percent-escapes are part of it.
        let jar = CookieJar(now: { Self.now })
        jar.receive(["a=1; Path=/app/"], from: URL(string: "https://www.example.com/app/")!)
        #expect(jar.headerValue(for: URL(string: "https://www.example.com/app/")!) == "a=1")
        #expect(jar.headerValue(for: URL(string: "https://www.example.com/app")!) == nil)
        // The default path of /x/y/ is /x/y (everything before the right-most "/").
        jar.receive(["b=2"], from: URL(string: "https://www.example.com/x/y/")!)
        #expect(jar.allCookies.first { $0.name == "b" }?.path == "/x/y")
        #expect(jar.headerValue(for: URL(string: "https://www.example.com/x/z")!) == nil)
        jar.receive(["c=3; Path=/my%20docs"], from: URL(string: "https://www.example.com/my%20docs/p")!)
        #expect(jar.headerValue(for: URL(string: "https://www.example.com/my%20docs/p")!) == "c=3")
    }

    @Test
    func anExpiredSecureCookieNoLongerShieldsItsName() {
        // RFC 6265bis §5.7 protects stored Secure cookies from insecure origins; an expired one is
        // no longer stored (RFC 6265 §5.3), so http may set the name again.
        let clock = TestClock(start: Self.now)
        let jar = CookieJar(now: { clock.now })
        jar.set(Cookie(name: "sid", value: "old", domain: "www.example.com", expires: Self.now.addingTimeInterval(10), secure: true))
        jar.receive(["sid=early"], from: URL(string: "http://www.example.com/")!)
        #expect(jar.allCookies.map(\.value) == ["old"])
        clock.advance(20)
        jar.receive(["sid=new"], from: URL(string: "http://www.example.com/")!)
        #expect(jar.allCookies.map(\.value) == ["new"])
    }

    @Test(arguments: [
        ("www.example.com", "example.com", true), ("example.com", "example.com", true),
        ("badexample.com", "example.com", false), ("example.com", "www.example.com", false),
        ("127.0.0.1", "0.0.1", false),
    ])
    func domainMatching(_ host: String, _ domain: String, _ matches: Bool) {
        #expect(CookieRules.domainMatches(host, domain) == matches)  // §5.1.3
    }

    @Test(arguments: [
        ("/", "/", true), ("/api", "/api", true), ("/api/v1", "/api", true), ("/api/v1", "/api/", true),
        ("/apis", "/api", false), ("/", "/api", false),
    ])
    func pathMatching(_ path: String, _ cookiePath: String, _ matches: Bool) {
        #expect(CookieRules.pathMatches(path, cookiePath) == matches)  // §5.1.4
    }

    @Test(arguments: [("/a/b/c", "/a/b"), ("/a", "/"), ("/", "/"), ("", "/"), ("relative", "/")])
    func theDefaultPathIsTheRequestsDirectory(_ path: String, _ expected: String) {
        #expect(CookieRules.defaultPath(path) == expected)  // §5.1.4
        #expect(Self.parse("a=1", path: path)?.path == expected)
    }

    @Test
    func secureAndSameSiteNoneNeedASecureOrigin() {
        // RFC 6265bis §5.7: no Secure cookie from http; SameSite=None requires Secure.
        #expect(Self.parse("a=1; Secure", secure: false) == nil)
        #expect(Self.parse("a=1; SameSite=None", secure: true) == nil)
        #expect(Self.parse("a=1; SameSite=None; Secure", secure: true)?.sameSite == Cookie.SameSite.none)
    }

    @Test
    func theSizeLimitsAreThoseOfTheNameAndValueAndOfEachAttribute() throws {
        // RFC 6265bis §5.6: name and value together up to 4096 bytes, whatever the attributes
        // add (a 4050-byte token with its Path, Domain and Expires is kept); an attribute value
        // over 1024 bytes is ignored, not the cookie; HTAB is no control character to refuse,
        // but any other one, in an attribute too, makes the whole string ignored.
        let token = String(repeating: "t", count: 4050)
        let kept = try #require(
            Self.parse("session=\(token); Path=/; Domain=example.com; Expires=Wed, 21 Oct 2099 07:28:00 GMT; Secure; HttpOnly"))
        #expect(kept.value == token)
        #expect(kept.path == "/")
        #expect(Self.parse("n=" + String(repeating: "v", count: 4095)) != nil)
        #expect(Self.parse("n=" + String(repeating: "v", count: 4096)) == nil)
        let longPath = try #require(Self.parse("a=1; Path=/" + String(repeating: "p", count: 1100)))
        #expect(longPath.path == "/a/b")
        #expect(Self.parse("a=b\tc")?.value == "b\tc")
        #expect(Self.parse("a=1; Path=/x\u{01}") == nil)
    }

    @Test(arguments: ["=nameless", "noequals", "a=b\u{01}c", "a\nb=c", "big=" + String(repeating: "x", count: 5000)])
    func malformedOrHugeCookiesAreIgnored(_ header: String) {
        #expect(Self.parse(header) == nil)
    }

    @Test
    func theJarReplacesKeepsOrderAndLimits() throws {
        // §5.3 step 11: same name, domain and path replaces (keeping its creation time); §5.4:
        // longer paths first, then older; §6.1 limits: 50 per domain.
        let clock = TestClock(start: Self.now)
        let jar = CookieJar(now: { clock.now })
        let url = URL(string: "https://www.example.com/api/items")!
        jar.set(Cookie(name: "a", value: "1", domain: "www.example.com", path: "/", created: clock.now))
        clock.advance(1)
        jar.set(Cookie(name: "b", value: "2", domain: "www.example.com", path: "/api", created: clock.now))
        clock.advance(1)
        jar.set(Cookie(name: "a", value: "3", domain: "www.example.com", path: "/", created: clock.now))
        #expect(jar.cookies(for: url).map { "\($0.name)=\($0.value)" } == ["b=2", "a=3"])
        #expect(jar.allCookies.first { $0.name == "a" }?.created == Self.now)
        for index in 0..<60 {
            jar.set(Cookie(name: "n\(index)", value: "v", domain: "www.example.com", created: clock.now.addingTimeInterval(Double(index))))
        }
        #expect(jar.allCookies.count == 50)
        jar.set(Cookie(name: "b", value: "gone", domain: "www.example.com", path: "/api", expires: .distantPast))
        #expect(!jar.allCookies.contains { $0.name == "b" })
    }

    @Test
    func aStoreOverTheLimitsIsTrimmedAtLoadAndTheNextCookieDoesNotTrap() throws {
        // §6.1 limits (50 per domain, 3000 in all) hold for a store another program wrote, or an
        // older one: loaded over both, a Secure cookie that evicted one of its domain's then
        // looked past the end of the jar for itself, and trapped. Trimmed, Secure cookies stay
        // before newer ones that are not (RFC 6265bis §5.8.3, as eviction does).
        let clock = TestClock(start: Self.now)
        let expires = Self.now.addingTimeInterval(3600)
        let crowded = (0..<60).map {
            Cookie(
                name: "c\($0)", value: "v", domain: "example.com", expires: expires, secure: true,
                created: Self.now.addingTimeInterval(Double($0)))
        }
        let others = (0..<2990).map {
            Cookie(
                name: "o", value: "v", domain: "d\($0).example.net", expires: expires, secure: true,
                created: Self.now.addingTimeInterval(-1000))
        }
        let directory = temporaryDirectory("cookies")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = FileCookieStore(file: directory.appendingPathComponent("cookies.json"))
        let insecure = (0..<10).map {
            Cookie(
                name: "i\($0)", value: "v", domain: "example.com", expires: expires, created: Self.now.addingTimeInterval(Double(100 + $0)))
        }
        store.save(crowded + insecure + others)
        #expect(store.load().count == 3060)
        let jar = CookieJar(store: store, now: { clock.now })
        // Secure first, then the most recently created: c10…c59, then 2950 of the others.
        #expect(jar.allCookies.count == 3000)
        #expect(jar.allCookies.filter { $0.domain == "example.com" }.map(\.name) == (10..<60).map { "c\($0)" })
        clock.advance(100)
        jar.set(Cookie(name: "new", value: "1", domain: "example.com", expires: expires, secure: true, created: clock.now))
        #expect(jar.allCookies.count == 3000)
        #expect(jar.allCookies.filter { $0.domain == "example.com" }.count == 50)
        #expect(jar.allCookies.contains { $0.name == "new" })
    }

    @Test
    func namesThatDifferInBytesAreTwoCookiesEvenWhenCanonicallyEquivalent() throws {
        // §5.3 step 11 replaces a cookie with "the same name" as the server sent it: names are
        // octets. "é" as one code point (C3 A9) and as "e" + combining acute (65 CC 81) are equal
        // to Swift's `==` (canonical equivalence), and must still be two cookies.
        let clock = TestClock(start: Self.now)
        let jar = CookieJar(now: { clock.now })
        let url = URL(string: "https://www.example.com/")!
        jar.receive(["\u{E9}=1"], from: url)
        jar.receive(["e\u{301}=2"], from: url)
        let names = jar.allCookies.map { Array($0.name.utf8) }.sorted { $0.lexicographicallyPrecedes($1) }
        #expect(names == [Array("e\u{301}".utf8), Array("\u{E9}".utf8)])
        // And a cookie with the byte-identical name still replaces.
        jar.receive(["\u{E9}=3"], from: url)
        #expect(jar.allCookies.count == 2)
        #expect(jar.allCookies.first { Array($0.name.utf8) == Array("\u{E9}".utf8) }?.value == "3")
        // RFC 6265bis §5.7: an insecure origin's cookie only shadows a Secure one of the very same name.
        jar.receive(["s\u{E9}=secure; Secure"], from: url)
        jar.receive(["se\u{301}=plain"], from: URL(string: "http://www.example.com/")!)
        #expect(jar.allCookies.count == 4)
        // §5.1.4: paths match as bytes too.
        #expect(CookieRules.pathMatches("/caf\u{E9}/x", "/caf\u{E9}"))
        #expect(!CookieRules.pathMatches("/cafe\u{301}/x", "/caf\u{E9}"))
        #expect(!CookieRules.pathMatches("/cafe\u{301}", "/caf\u{E9}"))
        #expect(CookieRules.pathMatches("/a/b", "/a/"))
        #expect(!CookieRules.pathMatches("/ab", "/a"))
    }

    @Test
    func cookiesThatDifferInBytesAreUnequalAndBothStayInASet() throws {
        // The jar keeps "\u{E9}" and "e\u{301}" as two cookies (RFC 6265 §5.3 step 11: names are
        // octets); the public value type must not fold them back into one by Swift's canonical
        // `String` equality, in `==` or in a `Set`.
        let created = Self.now
        let composed = Cookie(name: "\u{E9}", value: "1", domain: "example.com", created: created)
        let decomposed = Cookie(name: "e\u{301}", value: "1", domain: "example.com", created: created)
        #expect(composed != decomposed)
        #expect(Set([composed, decomposed]).count == 2)
        // Values, domains and paths compare as bytes as well.
        #expect(
            Cookie(name: "a", value: "\u{E9}", domain: "example.com", created: created)
                != Cookie(name: "a", value: "e\u{301}", domain: "example.com", created: created))
        #expect(
            Cookie(name: "a", value: "1", domain: "example.com", path: "/caf\u{E9}", created: created)
                != Cookie(name: "a", value: "1", domain: "example.com", path: "/cafe\u{301}", created: created))
        // Byte-identical cookies are still equal, with equal hashes.
        let again = Cookie(name: "\u{E9}", value: "1", domain: "EXAMPLE.com", created: created)
        #expect(composed == again)
        #expect(Set([composed, again]).count == 1)
        // And every other field still counts.
        var secure = composed
        secure.secure = true
        #expect(secure != composed)
        let jar = CookieJar(now: { created })
        let url = URL(string: "https://www.example.com/")!
        jar.receive(["\u{E9}=1", "e\u{301}=1"], from: url)
        #expect(Set(jar.allCookies).count == 2)
    }

    @Test
    func pastTheLimitTheCookieUsedLongestAgoGoesFirst() throws {
        // RFC 6265 §5.3: among cookies of equal removal priority, the one with the earliest
        // last-access date is evicted first (§5.4 step 3: sending a cookie updates it).
        let clock = TestClock(start: Self.now)
        let jar = CookieJar(now: { clock.now })
        for index in 0..<50 {
            jar.set(Cookie(name: "c\(index)", value: "v", domain: "www.example.com", path: "/p\(index)", created: clock.now))
            clock.advance(1)
        }
        // The oldest cookie is used now; the second oldest has not been used since it was set.
        #expect(jar.headerValue(for: URL(string: "https://www.example.com/p0")!) == "c0=v")
        clock.advance(1)
        jar.set(Cookie(name: "new", value: "v", domain: "www.example.com", created: clock.now))
        let names = Set(jar.allCookies.map(\.name))
        #expect(names.count == 50)
        #expect(names.contains("c0"))
        #expect(!names.contains("c1"))
        #expect(names.contains("new"))
    }

    @Test(arguments: [
        ("a=1; Path=/x; Path=bogus", "/dir"),  // the last Path wins, and an invalid one means the default path
        ("a=1; Path=bogus; Path=/x", "/x"),
        ("a=1; Path=", "/dir"),
        ("a=1; Path=/x", "/x"),
    ])
    func theLastPathAttributeWinsAndAnInvalidOneMeansTheDefaultPath(_ header: String, _ expected: String) {
        // RFC 6265 §5.2.4 and §5.3 step 7.
        #expect(Self.parse(header, path: "/dir/page")?.path == expected)
    }
}
