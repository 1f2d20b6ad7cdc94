import CourierTestServer
import Foundation
import HTTPTypes
import Testing

@testable import Courier

/// Cookies through the pipeline against the in-process server, on both transports.
@Suite("Cookies through the client")
struct CookieJarTests {
    /// `/login` answers 302 to `/home` with a session cookie; every route echoes the Cookie field it got.
    static func origin(_ request: RecordedRequest) async -> ScriptedResponse {
        let received = request.header("Cookie") ?? ""
        switch request.path {
        case "/login":
            return ScriptedResponse(
                status: 302,
                headers: [
                    ("Location", "/home"), ("Set-Cookie", "session=s3cr3t; Path=/; HttpOnly"),
                    ("Set-Cookie", "theme=dark; Path=/; Expires=Wed, 09 Jun 2100 10:18:14 GMT; Max-Age=3600"),
                    ("Set-Cookie", "api=1; Path=/api"), ("Set-Cookie", "secure=1; Secure"),
                ])
        case "/logout":
            return .text("bye", headers: [("Set-Cookie", "theme=; Path=/; Max-Age=0")])
        case "/plant":
            // Cookies whose names promise what an http origin cannot give.
            return .text(
                "planted",
                headers: [
                    ("Set-Cookie", "__Host-sid=evil; Path=/"), ("Set-Cookie", "__Secure-sid=evil; Path=/"),
                    ("Set-Cookie", "plain=1; Path=/"),
                ])
        case "/flood":
            // Fifty fillers, then a session cookie: an eviction of the Secure one would let it in.
            let fillers = (0..<50).map { ("Set-Cookie", "filler\($0)=1; Path=/") }
            return .text("flooded", headers: fillers + [("Set-Cookie", "session=evil; Path=/")])
        case "/squeeze":
            // One cookie to fill a domain of Secure ones, then the session cookie they shadow.
            return .text("squeezed", headers: [("Set-Cookie", "x=1; Path=/"), ("Set-Cookie", "session=evil; Path=/")])
        case "/reflect":
            // A value the server reflects, with a comma in it: one field, one cookie.
            return .text("reflected", headers: [("Set-Cookie", "prefs=a,admin=1; Path=/"), ("Set-Cookie", "z=9; Path=/")])
        case "/flaky":
            let attempts = request.query["n"] ?? "0"
            return attempts == "0" && !received.contains("retry=1")
                ? .text("busy", status: 503, headers: [("Set-Cookie", "retry=1; Path=/")])
                : .text(received)
        default:
            return .text(received)
        }
    }

    func withJar(
        _ kind: TransportKind, jar: CookieJar = CookieJar(), _ body: (Client, TestServer, CookieJar) async throws -> Void
    ) async throws {
        let server = try await http1Server(Self.origin)
        try await withClient(
            kind, server: server,
            configure: {
                $0.cookies = jar
                $0.retry = .never
            }
        ) { client in
            try await body(client, server, jar)
        }
    }

    static func get(_ path: String, headers: HTTPFields = [:]) -> Endpoint<String> {
        Endpoint<String>(path: path, headers: headers, decoding: .string)
    }

    @Test(arguments: TransportKind.allCases)
    func aLoginRedirectsSessionCookieIsSentWithTheRedirectedRequestAndAfter(_ kind: TransportKind) async throws {
        // Seam cookies × redirects: the 302's Set-Cookie is stored before its hop leaves.
        try await withJar(kind) { client, server, jar in
            let home = try await client.send(Endpoint<String>(method: .post, path: "/login", decoding: .string))
            #expect(home == "session=s3cr3t; theme=dark")
            #expect(server.requests.map(\.path) == ["/login", "/home"])
            // §5.4: path-matched, longer paths first; a Secure cookie from http was ignored.
            #expect(try await client.send(Self.get("/api/items")) == "api=1; session=s3cr3t; theme=dark")
            #expect(try await client.send(Self.get("/apis")) == "session=s3cr3t; theme=dark")
            // HttpOnly stays out of what scripts may see; the app's own view has it.
            let url = server.baseURL.appendingPathComponent("home")
            #expect(jar.cookies(for: url).map(\.name) == ["theme"])
            #expect(Set(jar.allCookies.map(\.name)) == ["session", "theme", "api"])
        }
    }

    /// RFC 6265 §3: one `Set-Cookie` field is one cookie. URLSession's platform joins repeated
    /// fields with ", ", and Courier split them at any comma before a `name=`: a reflected value
    /// `prefs=a,admin=1` made an `admin` cookie there, and not on AsyncHTTPClient.
    @Test(arguments: TransportKind.allCases)
    func aCommaInsideOneSetCookieValueMakesNoSecondCookie(_ kind: TransportKind) async throws {
        try await withJar(kind) { client, server, jar in
            let first = try await client.send(Self.get("/reflect"))
            #expect(first == "reflected")
            #expect(Set(jar.allCookies.map(\.name)) == ["prefs", "z"])
            let sent = try await client.send(Self.get("/home"))
            #expect(sent == "prefs=a,admin=1; z=9")
        }
    }

    @Test(arguments: TransportKind.allCases)
    func maxAgeZeroDeletesAndSignOutClearsEverything(_ kind: TransportKind) async throws {
        try await withJar(kind) { client, server, jar in
            _ = try await client.send(Endpoint<String>(method: .post, path: "/login", decoding: .string))
            _ = try await client.send(Self.get("/logout"))
            #expect(try await client.send(Self.get("/home")) == "session=s3cr3t")
            jar.removeAll()
            #expect(try await client.send(Self.get("/home")) == "")
            #expect(server.requests.last?.header("Cookie") == nil)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func withStoringOffTheAppsOwnCookiesAreStillSent(_ kind: TransportKind) async throws {
        // The seed's requirement: cookies injected even when automatic storage is off.
        let jar = CookieJar(storesResponseCookies: false)
        try await withJar(kind, jar: jar) { client, server, jar in
            jar.set(Cookie(name: "device", value: "42", domain: server.baseURL.host!))
            let home = try await client.send(Endpoint<String>(method: .post, path: "/login", decoding: .string))
            #expect(home == "device=42")
            #expect(jar.allCookies.map(\.name) == ["device"])
        }
    }

    @Test(arguments: TransportKind.allCases)
    func anAppSetCookieThatCouldSplitTheCookieFieldIsIgnoredAsAServersWouldBe(_ kind: TransportKind) async throws {
        // RFC 6265bis §4.1.1: a cookie-value holds no ";" and no control character. Set by the
        // app, such a value would smuggle a second cookie (or a line end) into every request.
        try await withJar(kind) { client, server, jar in
            let host = server.baseURL.host!
            jar.set(Cookie(name: "device", value: "42; admin=1", domain: host))
            jar.set(Cookie(name: "role=admin", value: "1", domain: host))
            jar.set(Cookie(name: "", value: "1", domain: host))
            jar.set(Cookie(name: "line", value: "1\r\nX-Evil: 1", domain: host))
            jar.set(Cookie(name: "huge", value: String(repeating: "v", count: 5000), domain: host))
            jar.set(Cookie(name: "fine", value: "a b", domain: host))
            #expect(jar.allCookies.map(\.name) == ["fine"])
            let echoed = try await client.send(Self.get("/home"))
            #expect(echoed == "fine=a b")
        }
    }

    @Test(arguments: TransportKind.allCases)
    func anEndpointsOwnCookieFieldStaysFirst(_ kind: TransportKind) async throws {
        try await withJar(kind) { client, _, jar in
            _ = try await client.send(Endpoint<String>(method: .post, path: "/login", decoding: .string))
            let echoed = try await client.send(Self.get("/home", headers: [.cookie: "mine=1"]))
            #expect(echoed == "mine=1; session=s3cr3t; theme=dark")
            #expect(jar.allCookies.count == 3)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aRetriedAttemptCarriesTheCookieTheFailedOneSet(_ kind: TransportKind) async throws {
        // Seam cookies × retry: the stage sits below retry, so the second attempt has the cookie.
        let server = try await http1Server(Self.origin)
        try await withClient(
            kind, server: server,
            configure: {
                $0.cookies = CookieJar()
                $0.retry = RetryPolicy(maxAttempts: 2, baseDelay: .milliseconds(1))
            }
        ) { client in
            let echoed = try await client.send(Self.get("/flaky"))
            #expect(echoed == "retry=1")
            #expect(server.requests.count == 2)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func anInsecureOriginCannotOverwriteASecureCookie(_ kind: TransportKind) async throws {
        // RFC 6265bis §5.7: session fixation over http is refused.
        try await withJar(kind) { client, server, jar in
            jar.set(Cookie(name: "session", value: "real", domain: server.baseURL.host!, secure: true))
            _ = try await client.send(Endpoint<String>(method: .post, path: "/login", decoding: .string))
            #expect(jar.allCookies.first { $0.name == "session" }?.value == "real")
            #expect(jar.allCookies.contains { $0.name == "theme" })
        }
    }

    @Test(arguments: TransportKind.allCases)
    func anInsecureOriginCannotSetCookiesWhoseNamesPromiseSecurity(_ kind: TransportKind) async throws {
        // RFC 6265bis §4.1.3 and §5.7: `__Host-` and `__Secure-` cookies need a Secure flag,
        // which an http origin cannot set; the plain cookie of the same answer is stored.
        try await withJar(kind) { client, _, jar in
            _ = try await client.send(Self.get("/plant"))
            #expect(jar.allCookies.map(\.name) == ["plain"])
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aFloodOfCookiesFromAnInsecureOriginCannotEvictASecureOne(_ kind: TransportKind) async throws {
        // RFC 6265bis §5.8.3: past the per-domain limit, cookies that are not Secure go first.
        // Were the Secure session evicted, the flood's own `session` would take its place.
        try await withJar(kind) { client, server, jar in
            jar.set(Cookie(name: "session", value: "real", domain: server.baseURL.host!, secure: true))
            _ = try await client.send(Self.get("/flood"))
            let session = jar.allCookies.filter { $0.name == "session" }
            #expect(session.map(\.value) == ["real"])
            #expect(session.first?.secure == true)
            #expect(jar.allCookies.count == CookieJar.perDomainLimit)
            // The stalest filler made room for the last one.
            #expect(!jar.allCookies.contains { $0.name == "filler0" })
            #expect(jar.allCookies.contains { $0.name == "filler49" })
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aCookieFromAnInsecureOriginNeverEvictsASecureOneEvenWhenOnlySecureOnesAreLeft(_ kind: TransportKind) async throws {
        // RFC 6265bis §5.8.3: a cookie that is not Secure goes before any Secure one, the one
        // just set included. With the domain full of Secure cookies, an http response's cookie
        // is refused: were the stalest Secure one (the session) evicted for it, the response's
        // next cookie would plant its own session (§5.7 lets it once no Secure one shadows it).
        try await withJar(kind) { client, server, jar in
            let host = server.baseURL.host!
            jar.set(Cookie(name: "session", value: "real", domain: host, secure: true))
            for index in 1..<CookieJar.perDomainLimit {
                jar.set(Cookie(name: "secure\(index)", value: "1", domain: host, secure: true))
            }
            _ = try await client.send(Self.get("/squeeze"))
            #expect(server.requests.count == 1)
            let cookies = jar.allCookies
            #expect(cookies.count == CookieJar.perDomainLimit)
            #expect(cookies.allSatisfy { $0.secure })
            #expect(cookies.filter { $0.name == "session" }.map(\.value) == ["real"])
            #expect(!cookies.contains { $0.name == "x" })
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aCachedResponseSetsNoCookieAgain(_ kind: TransportKind) async throws {
        // Seam cookies × cache: the stage is below the cache; a hit does not replay Set-Cookie.
        // Nor is the cookie kept in the stored response (RFC 9111 §7.3 allows it; a private
        // cache on disk would keep a session cookie past `removeAll()`).
        let jar = CookieJar()
        let store = RecordingStore()
        let server = try await http1Server { _ in
            .text("page", headers: [("Cache-Control", "max-age=60"), ("Set-Cookie", "seen=1; HttpOnly"), ("X-Kept", "yes")])
        }
        try await withClient(
            kind, server: server,
            configure: {
                $0.cookies = jar
                $0.cache.store = store
            }
        ) { client in
            let first = try await client.response(Self.get("/page"))
            #expect(first.headers[.setCookie] == "seen=1; HttpOnly")
            #expect(jar.allCookies.map(\.name) == ["seen"])
            jar.removeAll()
            let hit = try await client.response(Self.get("/page"))
            #expect(hit.source == .cache)
            #expect(jar.allCookies.isEmpty)
            #expect(hit.headers[.setCookie] == nil)
            #expect(hit.headers[HTTPField.Name("X-Kept")!] == "yes")
            let stored = store.stored.withLock { $0 }
            #expect(stored.count == 1)
            #expect(stored.allSatisfy { $0.headers[.setCookie] == nil })
        }
    }

    @Test(arguments: TransportKind.allCases)
    func persistentCookiesSurviveARestartOwnerOnlyAndSessionCookiesDoNot(_ kind: TransportKind) async throws {
        let directory = temporaryDirectory("cookies")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("cookies.json")
        try await withJar(kind, jar: CookieJar(store: FileCookieStore(file: file))) { client, server, _ in
            _ = try await client.send(Endpoint<String>(method: .post, path: "/login", decoding: .string))
            #expect(posixPermissions(file) == 0o600)
            // After a restart only the cookie with a lifetime (theme) is there.
            let restarted = CookieJar(store: FileCookieStore(file: file))
            #expect(restarted.allCookies.map(\.name) == ["theme"])
            #expect(restarted.cookies(for: server.baseURL.appendingPathComponent("home")).first?.value == "dark")
        }
        try Data("not json".utf8).write(to: file)
        #expect(CookieJar(store: FileCookieStore(file: file)).allCookies.isEmpty)
    }

    @Test
    func aStoreIsHeldToTheRulesOfAServerAndLifetimesToFourHundredDays() throws {
        // A store file edited, or written by another program, loads only well-formed cookies.
        let directory = temporaryDirectory("cookies")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = FileCookieStore(file: directory.appendingPathComponent("cookies.json"))
        let later = Date().addingTimeInterval(3600)
        store.save([
            Cookie(name: "ok", value: "1", domain: "example.com", expires: later),
            Cookie(name: "bad", value: "1; admin=1", domain: "example.com", expires: later),
        ])
        #expect(CookieJar(store: store).allCookies.map(\.name) == ["ok"])
        // Saved with a lifetime past the cap (before there was one): loaded with 400 days.
        store.save([Cookie(name: "old", value: "1", domain: "example.com", expires: Date().addingTimeInterval(10 * 365 * 86_400))])
        let loaded = try #require(CookieJar(store: store).allCookies.first?.expires)
        #expect(loaded <= Date().addingTimeInterval(400 * 86_400))
        // RFC 6265bis §5.6.1: an app's cookie lives no longer than a server's could.
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        let jar = CookieJar(now: { now })
        jar.set(Cookie(name: "forever", value: "1", domain: "example.com", expires: .distantFuture))
        #expect(jar.allCookies.first?.expires == now.addingTimeInterval(400 * 86_400))
    }
}
