import Courier
import CourierAsyncHTTPClient
import CourierTestServer
import Foundation
import HTTPTypes
import Testing

/// A cache store that counts its writes, so a test can wait for a background revalidation.
final class RecordingStore: CacheStore {
    let inner = MemoryCacheStore()
    let writes = Locked(0)
    let stored = Locked([CacheEntry]())
    func entry(forKey key: String) -> CacheEntry? { self.inner.entry(forKey: key) }
    func setEntry(_ entry: CacheEntry, forKey key: String) {
        self.stored.withLock { $0.append(entry) }
        self.writes.withLock { $0 += 1 }
        self.inner.setEntry(entry, forKey: key)
    }
    func removeEntry(forKey key: String) { self.inner.removeEntry(forKey: key) }
    func removeEntries(in scope: CacheScope) { self.inner.removeEntries(in: scope) }
}

/// An IMF-fixdate for `date` (RFC 9110 §5.6.7).
func imfDate(_ date: Date) -> String {
    let formatter = DateFormatter()
    formatter.locale = Locale(identifier: "en_US_POSIX")
    formatter.timeZone = TimeZone(identifier: "GMT")
    formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
    return formatter.string(from: date)
}

/// Each test cites the section of RFC 9111 (HTTP Caching), RFC 5861 (stale content) or RFC 8246
/// (immutable) whose rule it shows, through the public API against the in-process server.
@Suite("HTTP cache: the rules of RFC 9111, one by one")
struct RFC9111Tests {
    /// Runs `body` with a caching client (hand-moved clock, retries off) against a server with `handler`.
    func withCache(
        _ kind: TransportKind = .asyncHTTPClient,
        store: any CacheStore = MemoryCacheStore(),
        policy: CachePolicy = .http,
        handler: @escaping TestServer.Handler,
        _ body: (Client, TestServer, TestClock) async throws -> Void
    ) async throws {
        let clock = TestClock()
        let server = try await http1Server(handler)
        try await withClient(
            kind, server: server,
            configure: {
                $0.cache = CacheConfiguration(store: store, policy: policy, now: { clock.now })
                $0.retry = .never
            }
        ) { client in
            try await body(client, server, clock)
        }
    }

    static func get(
        _ path: String, _ headers: HTTPFields = [:], policy: CachePolicy? = nil, accepting: Range<Int> = 200..<300
    ) -> Endpoint<String> {
        var endpoint = Endpoint<String>(path: path, headers: headers, acceptedStatuses: accepting, decoding: .string)
        endpoint.cachePolicy = policy
        return endpoint
    }

    /// A body that changes on every answer, so a stored answer is told from a new one.
    static func counted(_ counter: Locked<Int>) -> String {
        let count = counter.withLock {
            $0 += 1
            return $0
        }
        return "answer \(count)"
    }

    @Test
    func theDocCArticleNamesOnlyTestsThatExist() throws {
        // Every rule row of Caching.md names its tests; a renamed or deleted test fails here.
        let root = URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let article = try String(contentsOf: root.appendingPathComponent("Sources/Courier/Courier.docc/Caching.md"), encoding: .utf8)
        let rows = article.split(separator: "\n").filter { $0.hasPrefix("| ") && !$0.hasPrefix("| Rule") }
        #expect(rows.count >= 20)
        let tests = try FileManager.default.subpathsOfDirectory(atPath: root.appendingPathComponent("Tests").path)
            .filter { $0.hasSuffix(".swift") }
            .map { try String(contentsOf: root.appendingPathComponent("Tests").appendingPathComponent($0), encoding: .utf8) }
            .joined()
        for row in rows {
            let cells = row.split(separator: "|")
            let names =
                cells.last.map { $0.split(separator: "`").enumerated().filter { $0.offset % 2 == 1 }.map { String($0.element) } } ?? []
            #expect(!names.isEmpty, "\(row)")
            for name in names {
                let function = name.split(separator: ".").last.map(String.init) ?? name
                #expect(tests.contains("func \(function)(") || tests.contains("struct \(function)"), "\(name) is not a test")
            }
        }
    }

    // MARK: - §5.1 Age

    @Test(arguments: TransportKind.allCases)
    func aStoredResponseCarriesAnAgeFieldCountingItsTimeInTheCache(_ kind: TransportKind) async throws {
        // RFC 9111 §5.1: a cache MUST generate Age when it uses a stored response; §4.2.3: a
        // stored Age: 30 that sat 3 more seconds is at least 33.
        try await withCache(kind, handler: { _ in .text("article", headers: [("Cache-Control", "max-age=100"), ("Age", "30")]) }) {
            client, server, clock in
            let first = try await client.response(Self.get("/a"))
            #expect(first.headers[.age] == "30")
            clock.advance(3)
            let hit = try await client.response(Self.get("/a"))
            #expect(hit.source == .cache)
            #expect(hit.headers[.age] == "33")
            #expect(hit.headers[values: .age].count == 1)
            #expect(hit.age == .seconds(33))
            #expect(server.requests.count == 1)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aRefreshBy304WithoutDateOrAgeMakesTheStoredResponseFreshAgain(_ kind: TransportKind) async throws {
        // RFC 9111 §4.3.4: a 304 refreshes the stored response. RFC 9110 §6.6.1: a response
        // without Date MUST be dated at receipt when it is cached, so the refreshed response is
        // as old as the 304, not as the first answer; and RFC 9111 §5.1: the old Age spoke of an
        // earlier exchange, which the origin's 304 (no Age) has just validated again.
        let date = imfDate(TestClock().now)
        let handler: TestServer.Handler = { request in
            if request.header("If-None-Match") == "\"v1\"" {
                return ScriptedResponse(status: 304, headers: [("ETag", "\"v1\"")])
            }
            return .text("article", headers: [("Date", date), ("Cache-Control", "max-age=60"), ("ETag", "\"v1\""), ("Age", "10")])
        }
        try await withCache(kind, handler: handler) { client, server, clock in
            _ = try await client.send(Self.get("/r"))
            clock.advance(120)
            let revalidated = try await client.response(Self.get("/r"))
            #expect(revalidated.source == .revalidated)
            #expect(server.requests.count == 2)
            clock.advance(1)
            let hit = try await client.response(Self.get("/r"))
            #expect(hit.source == .cache)
            #expect(hit.age == .seconds(1))
            #expect(server.requests.count == 2)
        }
    }

    /// RFC 9111 §5.2.2.5 (a response's no-store: MUST NOT store any part of it) with §4.3.4 and
    /// §4.3.5: a 304 or a HEAD answer that says `no-store` refreshes nothing. The 304's caller
    /// gets the stored body once, and the stored response is gone: the next request goes to the
    /// origin, although the response's old Last-Modified would make a refreshed one fresh for a
    /// day by heuristic (§4.2.2).
    @Test(arguments: TransportKind.allCases)
    func aNotModifiedOrHEADAnswerThatSaysNoStoreRefreshesNothing(_ kind: TransportKind) async throws {
        let now = TestClock().now
        let date = imfDate(now)
        let lastModified = imfDate(now.addingTimeInterval(-30 * 86_400))
        let handler: TestServer.Handler = { request in
            let noStore = [("ETag", "\"v1\""), ("Cache-Control", "no-store"), ("Date", date)]
            if request.header("If-None-Match") == "\"v1\"" { return ScriptedResponse(status: 304, headers: noStore) }
            // The HEAD answer's body is not sent, but gives the Content-Length a GET would have.
            if request.method == "HEAD" { return ScriptedResponse(status: 200, headers: noStore, body: Data("article".utf8)) }
            return .text(
                "article", headers: [("Date", date), ("Cache-Control", "max-age=60"), ("ETag", "\"v1\""), ("Last-Modified", lastModified)])
        }
        try await withCache(kind, handler: handler) { client, server, clock in
            _ = try await client.send(Self.get("/r"))
            clock.advance(120)
            let revalidated = try await client.response(Self.get("/r"))
            #expect(revalidated.source == .revalidated)
            #expect(revalidated.value == "article")
            #expect(server.requests.count == 2)
            let next = try await client.response(Self.get("/r"))
            #expect(next.source == .network)
            #expect(server.requests.count == 3)
            #expect(server.requests.last?.header("If-None-Match") == nil)

            // A fresh stored GET response, then a HEAD of the same URL that says no-store.
            _ = try await client.send(Self.get("/h"))
            var head = Self.get("/h")
            head.method = .head
            _ = try await client.response(head)
            let before = server.requests.count
            let after = try await client.response(Self.get("/h"))
            #expect(after.source == .network)
            #expect(server.requests.count == before + 1)
        }
    }

    /// RFC 9111 §4.1: a stored response is reused only when the fields its `Vary` names match.
    /// A 304 that adds a field to `Vary` names one whose value in the stored request is unknown:
    /// its caller is answered, and the stored response is removed rather than chosen for a
    /// request with another value of the new field.
    @Test(arguments: TransportKind.allCases)
    func aNotModifiedThatVariesOnAnotherFieldRefreshesNothing(_ kind: TransportKind) async throws {
        let counter = Locked(0)
        let handler: TestServer.Handler = { request in
            if request.header("If-None-Match") == "\"a\"" {
                return ScriptedResponse(
                    status: 304, headers: [("ETag", "\"a\""), ("Cache-Control", "max-age=60"), ("Vary", "Accept-Language, X-Tenant")])
            }
            return .text(
                "\(Self.counted(counter)) for \(request.header("x-tenant") ?? "-")",
                headers: [("ETag", "\"a\""), ("Cache-Control", "max-age=60"), ("Vary", "Accept-Language")])
        }
        try await withCache(kind, handler: handler) { client, server, clock in
            let tenant1 = Self.get("/v", [.acceptLanguage: "en", HTTPField.Name("X-Tenant")!: "1"])
            let tenant2 = Self.get("/v", [.acceptLanguage: "en", HTTPField.Name("X-Tenant")!: "2"])
            #expect(try await client.send(tenant1) == "answer 1 for 1")
            clock.advance(120)
            let revalidated = try await client.response(tenant1)
            #expect(revalidated.source == .revalidated)
            #expect(revalidated.value == "answer 1 for 1")
            let other = try await client.response(tenant2)
            #expect(other.source == .network)
            #expect(other.value == "answer 2 for 2")
            #expect(server.requests.count == 3)
        }
    }

    /// RFC 9111 §4.3.4: a 304 updates the stored response its validator identifies. While one
    /// revalidation of v1 waits at the origin, another request (one the cache does not answer)
    /// gets and stores v2; the late 304 answers its own caller, and v2 stays stored.
    @Test(arguments: TransportKind.allCases)
    func aLateNotModifiedDoesNotReplaceANewerStoredResponse(_ kind: TransportKind) async throws {
        let gate = Gate()
        let handler: TestServer.Handler = { request in
            if request.header("x-fetch") == "new" {
                return .text("v2", headers: [("ETag", "\"v2\""), ("Cache-Control", "max-age=60")])
            }
            if request.header("If-None-Match") == "\"v1\"" {
                await gate.wait()
                return ScriptedResponse(status: 304, headers: [("ETag", "\"v1\""), ("Cache-Control", "max-age=60")])
            }
            return .text("v1", headers: [("ETag", "\"v1\""), ("Cache-Control", "max-age=0")])
        }
        try await withCache(kind, handler: handler) { client, server, clock in
            #expect(try await client.send(Self.get("/r")) == "v1")
            clock.advance(1)
            let late = client.start(Self.get("/r"))
            #expect(await eventually { server.requests.count == 2 })
            let newer = try await client.response(Self.get("/r", [HTTPField.Name("X-Fetch")!: "new"]))
            #expect(newer.value == "v2")
            await gate.open()
            #expect(try await late.value == "v1")
            let after = try await client.response(Self.get("/r"))
            #expect(after.source == .cache)
            #expect(after.value == "v2")
            #expect(server.requests.count == 3)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aRefreshBy304NamingTheCodingLeavesTheStoredBodyAsStored(_ kind: TransportKind) async throws {
        // The body is stored decoded; a 304 that repeats `Content-Encoding: gzip` (RFC 9111
        // §4.3.4 replaces the stored fields it names) must not label the stored bytes gzip.
        let json = #"{"id":7,"title":"\#(String(repeating: "stored ", count: 100))"}"#
        let gzipped = try Gzip.compress(Data(json.utf8))
        let handler: TestServer.Handler = { request in
            let fields = [("ETag", "\"g1\""), ("Cache-Control", "max-age=60"), ("Content-Encoding", "gzip")]
            if request.header("If-None-Match") == "\"g1\"" { return ScriptedResponse(status: 304, headers: fields) }
            return ScriptedResponse(status: 200, headers: [("Content-Type", "application/json")] + fields, body: gzipped)
        }
        try await withCache(kind, handler: handler) { client, server, clock in
            _ = try await client.send(Endpoint<Article>(path: "/g"))
            clock.advance(120)
            let revalidated = try await client.response(Endpoint<Article>(path: "/g"))
            #expect(revalidated.source == .revalidated)
            #expect(revalidated.value.id == 7)
            #expect(revalidated.headers[.contentEncoding] == nil)
            let hit = try await client.response(Endpoint<Article>(path: "/g"))
            #expect(hit.source == .cache)
            #expect(hit.value.id == 7)
            #expect(hit.headers[.contentEncoding] == nil)
            #expect(server.requests.count == 2)
        }
    }

    struct AgeRow: Sendable, CustomTestStringConvertible {
        let lines: [String]
        let stale: Bool
        var testDescription: String { self.lines.joined(separator: " | ") }
    }

    /// Under `max-age=3600`: an Age of 7200 makes the response stale at once.
    static let ageRows: [AgeRow] = [
        AgeRow(lines: ["7200, 0"], stale: true),  // a list on one line: its first member
        AgeRow(lines: ["7200", "0"], stale: true),  // two lines: the first
        AgeRow(lines: ["0, 7200"], stale: false),
        AgeRow(lines: ["7200.0"], stale: false),  // not delta-seconds: ignored
        AgeRow(lines: ["10a"], stale: false),
        AgeRow(lines: ["-1"], stale: false),
        AgeRow(lines: [""], stale: false),
        AgeRow(lines: ["99999999999999999999999999"], stale: true),  // past Int: the largest value, no trap
        AgeRow(lines: ["3599"], stale: false),
    ]

    @Test(arguments: TransportKind.allCases, ageRows)
    func ageIsDeltaSecondsReadFromTheFirstMember(_ kind: TransportKind, _ row: AgeRow) async throws {
        // RFC 9111 §5.1: Age is a non-negative integer; an invalid value is ignored; a list is read by its first member.
        let counter = Locked(0)
        let headers = [("Cache-Control", "max-age=3600")] + row.lines.map { ("Age", $0) }
        try await withCache(kind, handler: { _ in .text(Self.counted(counter), headers: headers) }) { client, server, _ in
            _ = try await client.send(Self.get("/a"))
            let second = try await client.response(Self.get("/a"))
            #expect(second.source == (row.stale ? .network : .cache))
            #expect(server.requests.count == (row.stale ? 2 : 1))
        }
    }

    // MARK: - §5.3 Expires

    struct ExpiresRow: Sendable, CustomTestStringConvertible {
        let value: String
        let valid: Bool
        /// A date only when names match in any letter case (a cache's reading, RFC 9111 §4.2).
        var wrongCase = false
        var testDescription: String { self.value }
    }

    /// The test clock's now is Fri, 15 Jan 2027 08:00:00 GMT; each valid value is two hours later.
    static let expiresRows: [ExpiresRow] = [
        ExpiresRow(value: "Fri, 15 Jan 2027 10:00:00 GMT", valid: true),  // IMF-fixdate
        ExpiresRow(value: "Friday, 15-Jan-27 10:00:00 GMT", valid: true),  // obsolete RFC 850
        ExpiresRow(value: "Fri Jan 15 10:00:00 2027", valid: true),  // obsolete asctime
        ExpiresRow(value: "Fri, 15 Jan 2027 9:00:00 GMT", valid: false),  // one-digit hour
        ExpiresRow(value: "Fri, 15-Jan-2027 10:00:00 GMT", valid: false),  // dashes
        ExpiresRow(value: "Fri,  15 Jan 2027 10:00:00 GMT", valid: false),  // several spaces
        ExpiresRow(value: "Fri 15 Jan 2027 10:00:00 GMT", valid: false),  // no comma
        ExpiresRow(value: "Fri, 15 Jan 2027 10.00.00 GMT", valid: false),  // dots for colons
        ExpiresRow(value: "Fri, 15 Jan 2027 10:00:00 UTC", valid: false),  // UTC for GMT
        ExpiresRow(value: "0", valid: false),
        ExpiresRow(value: "Fri, 15 Jan 99999999999999999999 10:00:00 GMT", valid: false),
        ExpiresRow(value: "Friday, 15-Jan-27 10:00:00 UTC", valid: false),
        ExpiresRow(value: "Fri Jan 15 10:00:00 2027 GMT", valid: false),
        // RFC 9111 §4.2: "Although all date formats are specified to be case-sensitive, a cache
        // recipient SHOULD match the field value case-insensitively."
        ExpiresRow(value: "fri, 15 JAN 2027 10:00:00 gmt", valid: true, wrongCase: true),
        ExpiresRow(value: "FRIDAY, 15-jan-27 10:00:00 Gmt", valid: true, wrongCase: true),
        ExpiresRow(value: "FRI jAN 15 10:00:00 2027", valid: true, wrongCase: true),
        // Case is all that is forgiven: a malformed date in any case is still in the past.
        ExpiresRow(value: "fri, 15 jan 2027 9:00:00 gmt", valid: false),
        ExpiresRow(value: "fri, 15 jan 2027 10:00:00 utc", valid: false),
        ExpiresRow(value: "fri, 15 janu 2027 10:00:00 gmt", valid: false),
    ]

    @Test(arguments: TransportKind.allCases, expiresRows.filter { !$0.wrongCase })
    func anExpiresThatIsNotAnHTTPDateIsInThePast(_ kind: TransportKind, _ row: ExpiresRow) async throws {
        // RFC 9111 §5.3: a cache MUST interpret an invalid Expires, such as "0", as a time in the
        // past; RFC 9110 §5.6.7: IMF-fixdate and the two obsolete formats are the only dates.
        try await self.checkExpires(kind, row)
    }

    @Test(arguments: TransportKind.allCases, expiresRows.filter(\.wrongCase))
    func anExpiresInTheWrongLetterCaseIsReadAsTheDateItNames(_ kind: TransportKind, _ row: ExpiresRow) async throws {
        // RFC 9111 §4.2: a cache SHOULD match the date formats case-insensitively — day, month
        // and zone names in any letter case.
        try await self.checkExpires(kind, row)
    }

    /// `Expires: row.value` two hours after `Date`: the second request is a hit when the value is a date.
    func checkExpires(_ kind: TransportKind, _ row: ExpiresRow) async throws {
        #expect((HTTPDate.parse(row.value, ignoringCase: true) != nil) == row.valid)
        // Outside the cache (RFC 9110 §5.6.7) the formats are case-sensitive.
        #expect((HTTPDate.parse(row.value) != nil) == (row.valid && !row.wrongCase))
        let counter = Locked(0)
        let date = imfDate(TestClock().now)
        try await withCache(kind, handler: { _ in .text(Self.counted(counter), headers: [("Date", date), ("Expires", row.value)]) }) {
            client, server, _ in
            _ = try await client.send(Self.get("/e"))
            let second = try await client.response(Self.get("/e"))
            #expect(second.source == (row.valid ? .cache : .network))
            #expect(server.requests.count == (row.valid ? 1 : 2))
        }
    }

    // MARK: - §3.1 Storing header fields

    @Test(arguments: TransportKind.allCases)
    func hopByHopFieldsAreNeitherStoredNorReplayed(_ kind: TransportKind) async throws {
        // RFC 9111 §3.1 and RFC 9110 §7.6.1: Connection and the fields it names, and the
        // standard hop-by-hop and proxy fields, are not stored.
        let store = RecordingStore()
        let headers = [
            ("Cache-Control", "max-age=60"), ("Connection", "X-Hop, x-other"), ("X-Hop", "secret"), ("X-Other", "also"),
            ("Keep-Alive", "timeout=5"), ("Proxy-Authenticate", "Basic realm=\"proxy\""), ("X-Kept", "yes"),
        ]
        try await withCache(kind, store: store, handler: { _ in .text("body", headers: headers) }) { client, server, _ in
            let first = try await client.response(Self.get("/h"))
            #expect(first.headers[HTTPField.Name("X-Kept")!] == "yes")
            let hit = try await client.response(Self.get("/h"))
            #expect(hit.source == .cache)
            #expect(hit.headers[HTTPField.Name("X-Kept")!] == "yes")
            for name in ["X-Hop", "X-Other", "Keep-Alive", "Proxy-Authenticate", "Connection"] {
                #expect(hit.headers[HTTPField.Name(name)!] == nil, "\(name) replayed")
            }
            let entry = try #require(store.stored.withLock { $0.last })
            #expect(entry.headers[HTTPField.Name("X-Hop")!] == nil)
            #expect(entry.headers[HTTPField.Name("Proxy-Authenticate")!] == nil)
            #expect(server.requests.count == 1)
        }
        // The rule itself, with the fields present (a transport may drop some before the cache sees them).
        let stored = CacheRules.storable(HTTPFields(headers.map { HTTPField(name: HTTPField.Name($0.0)!, value: $0.1) }))
        #expect(stored.map(\.name.canonicalName).sorted() == ["cache-control", "x-kept"])
    }

    @Test(arguments: TransportKind.allCases)
    func aConnectionFieldCannotDropTheCachingFieldsOfTheStoredCopy(_ kind: TransportKind) async throws {
        // RFC 9110 §7.6.1: Cache-Control is never a connection option. A careless server naming
        // it (and Expires) in Connection must not leave the stored copy without its `no-cache`,
        // where a month-old Last-Modified would make it heuristically fresh (RFC 9111 §4.2.2):
        // the second request is revalidated (RFC 9111 §5.2.2.4), not answered from the cache.
        let store = RecordingStore()
        let headers = [
            ("Cache-Control", "no-cache"), ("Connection", "cache-control, expires, x-hop"), ("Expires", "0"), ("X-Hop", "h"),
            ("ETag", "\"v1\""), ("Last-Modified", imfDate(TestClock().now.addingTimeInterval(-30 * 86_400))),
        ]
        try await withCache(kind, store: store, handler: { _ in .text("body", headers: headers) }) { client, server, _ in
            _ = try await client.response(Self.get("/c"))
            let entry = try #require(store.stored.withLock { $0.last })
            #expect(entry.headers[.cacheControl] == "no-cache")
            #expect(entry.headers[.expires] == "0")
            #expect(entry.headers[HTTPField.Name("X-Hop")!] == nil)
            let second = try await client.response(Self.get("/c"))
            #expect(second.source != .cache)
            #expect(server.requests.count == 2)
            #expect(server.requests.last?.header("if-none-match") == "\"v1\"")
        }
    }

    // MARK: - RFC 5861 stale-while-revalidate

    @Test(arguments: TransportKind.allCases)
    func staleWhileRevalidateServesAtOnceAndRevalidatesOnceForManyCallers(_ kind: TransportKind) async throws {
        // RFC 5861 §3: within the window the stale response is served and revalidated in the
        // background; deduplication makes the background request one, however many callers.
        let store = RecordingStore()
        let gate = Gate()
        let counter = Locked(0)
        let handler: TestServer.Handler = { request in
            if request.header("If-None-Match") == "\"v1\"" {
                await gate.wait()
                return ScriptedResponse(
                    status: 304, headers: [("ETag", "\"v1\""), ("Cache-Control", "max-age=100"), ("X-Revalidated", "yes")])
            }
            return .text(Self.counted(counter), headers: [("ETag", "\"v1\""), ("Cache-Control", "max-age=1, stale-while-revalidate=60")])
        }
        try await withCache(kind, store: store, handler: handler) { client, server, clock in
            let first = try await client.send(Self.get("/swr"))
            clock.advance(5)  // 4 s past freshness, inside the 60 s window
            let answers = try await withThrowingTaskGroup(of: Response<String>.self) { group in
                for _ in 0..<5 { group.addTask { try await client.response(Self.get("/swr")) } }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(answers.allSatisfy { $0.source == .stale && $0.value == first })
            #expect(answers.allSatisfy { $0.staleReason == .whileRevalidating })
            #expect(answers.allSatisfy { $0.headers[.age] == "5" })
            #expect(await eventually { server.requests.count == 2 })
            await gate.open()
            #expect(await eventually { store.writes.withLock { $0 } == 2 })
            #expect(server.requests.count == 2)
            #expect(server.requests.last?.header("If-None-Match") == "\"v1\"")
            // The 304 made it fresh again: served without the network, with the refreshed fields.
            let after = try await client.response(Self.get("/swr"))
            #expect(after.source == .cache)
            #expect(after.headers[HTTPField.Name("X-Revalidated")!] == "yes")
            #expect(server.requests.count == 2)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aBackgroundRevalidationQueuesAtLowPriority(_ kind: TransportKind) async throws {
        // Nobody waits for a revalidation in the background (RFC 5861 §3): it yields to requests
        // someone waits for, also through deduplication (on by default), which took the
        // endpoint's priority for it.
        let handler: TestServer.Handler = { request in
            if request.header("If-None-Match") == "\"v1\"" {
                return ScriptedResponse(status: 304, headers: [("ETag", "\"v1\""), ("Cache-Control", "max-age=100")])
            }
            return .text("article", headers: [("ETag", "\"v1\""), ("Cache-Control", "max-age=1, stale-while-revalidate=60")])
        }
        try await withCache(kind, handler: handler) { client, server, clock in
            var endpoint = Self.get("/swr")
            endpoint.priority = .high
            _ = try await client.send(endpoint)
            clock.advance(5)
            client.suspend()
            let stale = try await client.response(endpoint)
            #expect(stale.source == .stale)
            #expect(await eventually { client.traffic.queuedByPriority.values.reduce(0, +) == 1 })
            #expect(client.traffic.queuedByPriority == [.low: 1])
            client.resume()
            #expect(await eventually { server.requests.count == 2 })
            #expect(server.requests.last?.header("If-None-Match") == "\"v1\"")
        }
    }

    @Test(arguments: TransportKind.allCases)
    func pastTheStaleWhileRevalidateWindowTheCallerWaitsForTheOrigin(_ kind: TransportKind) async throws {
        let counter = Locked(0)
        try await withCache(
            kind, handler: { _ in .text(Self.counted(counter), headers: [("Cache-Control", "max-age=1, stale-while-revalidate=10")]) }
        ) { client, server, clock in
            _ = try await client.send(Self.get("/swr"))
            clock.advance(20)
            let late = try await client.response(Self.get("/swr"))
            #expect(late.source == .network)
            #expect(late.value == "answer 2")
            #expect(server.requests.count == 2)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func anEndpointOverridesStaleWhileRevalidateEitherWay(_ kind: TransportKind) async throws {
        // The policy's window replaces the response's: zero turns it off, a value turns it on.
        let counter = Locked(0)
        try await withCache(
            kind,
            handler: { request in
                let directive = request.path == "/with" ? "max-age=1, stale-while-revalidate=60" : "max-age=1"
                return .text(Self.counted(counter), headers: [("Cache-Control", directive)])
            }
        ) { client, server, clock in
            _ = try await client.send(Self.get("/with"))
            _ = try await client.send(Self.get("/without"))
            clock.advance(5)
            let off = try await client.response(Self.get("/with", policy: CachePolicy.http.servingStale(whileRevalidating: .zero)))
            #expect(off.source == .network)
            let on = try await client.response(Self.get("/without", policy: CachePolicy.http.servingStale(whileRevalidating: .seconds(30))))
            #expect(on.source == .stale)
            #expect(await eventually { server.requests.count == 4 })
        }
    }

    @Test(arguments: [
        ("stale-while-revalidate=99999999999999999999", true),  // past Int: 2^31 seconds, no trap
        ("stale-while-revalidate=-5", false),  // invalid: a window of nothing
        ("stale-while-revalidate=1e9", false),
        ("stale-while-revalidate", false),
        ("stale-while-revalidate=\"30\"", true),  // quoted-string form
        ("stale-while-revalidate=30, must-revalidate", false),  // RFC 9111 §4.2.4
    ])
    func staleWindowsFromTheWireNeverTrap(_ directive: String, _ servesStale: Bool) {
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        let entry = CacheEntry(
            url: "u", method: "GET", partition: "", status: 200,
            headers: [.cacheControl: "max-age=10, \(directive)", .eTag: "\"e\""], body: Data(),
            requestDate: now.addingTimeInterval(-20), responseDate: now.addingTimeInterval(-20)
        )
        let action = CacheRules.action(policy: .http, method: .get, requestHeaders: [:], entry: entry, now: now)
        if case .serveStale = action { #expect(servesStale) } else { #expect(!servesStale, "\(action)") }
        // The same numbers in stale-if-error, from the response and from the request.
        let onError = CacheRules.servesStaleOnError(
            policy: .http, entry: entry,
            requestHeaders: [.cacheControl: directive.replacingOccurrences(of: "while-revalidate", with: "if-error")], now: now
        )
        #expect((onError != nil) == servesStale)
    }

    // MARK: - RFC 5861 stale-if-error

    @Test(arguments: TransportKind.allCases, [500, 502, 503, 504])
    func staleIfErrorServesTheStoredResponseWhenTheOriginFails(_ kind: TransportKind, _ status: Int) async throws {
        // RFC 5861 §4: within the window, an error answer (500, 502, 503, 504) gets the stale response.
        let failing = Locked(false)
        try await withCache(
            kind,
            handler: { request in
                if failing.withLock({ $0 }) { return .text("down", status: status) }
                let directive = request.path == "/strict" ? "max-age=1, stale-if-error=60, must-revalidate" : "max-age=1, stale-if-error=60"
                return .text("good", headers: [("Cache-Control", directive)])
            }
        ) { client, server, clock in
            _ = try await client.send(Self.get("/sie"))
            _ = try await client.send(Self.get("/strict"))
            failing.withLock { $0 = true }
            clock.advance(30)
            let stale = try await client.response(Self.get("/sie"))
            #expect(stale.source == .stale)
            #expect(stale.staleReason == .originError)
            #expect(stale.value == "good")
            #expect(stale.headers[.age] == "30")
            // must-revalidate forbids it (RFC 9111 §4.2.4).
            let strict = await expectCourierError { _ = try await client.send(Self.get("/strict")) }
            #expect(strict?.status?.code == status)
            // Past the window the error comes through.
            clock.advance(60)
            let late = await expectCourierError { _ = try await client.send(Self.get("/sie")) }
            #expect(late?.status?.code == status)
            #expect(server.requests.count == 5)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func staleIfErrorServesTheStoredResponseWhenTheOriginCannotBeReached(_ kind: TransportKind) async throws {
        // RFC 5861 §4: "an error is any situation that would result in a 500, 502, 503 or 504
        // response" — here the origin is gone: connection refused.
        let clock = TestClock()
        // The port is held (bound, not listening) before the server listens on it too, so that once
        // the server stops no other test's server takes it and answers in the stopped one's place.
        let refusing = try RefusingPort()
        defer { withExtendedLifetime(refusing) {} }
        let server = try await http1Server(on: refusing.port) { _ in .text("good", headers: [("Cache-Control", "max-age=1")]) }
        let store = MemoryCacheStore()
        try await withClient(
            kind, server: server,
            configure: {
                $0.cache = CacheConfiguration(store: store, now: { clock.now })
            }
        ) { client in
            _ = try await client.send(Self.get("/gone"))
        }
        // The server has stopped; a new client (no pooled connection) on the same store finds nobody
        // there.
        let ahc = kind == .asyncHTTPClient ? AsyncHTTPClientTransport() : nil
        let transport: any Transport = ahc ?? URLSessionTransport()
        let client = Client(
            configuration: .init(transport: transport, baseURL: server.baseURL) {
                $0.cache = CacheConfiguration(
                    store: store, policy: CachePolicy.http.servingStale(ifError: .seconds(300)), now: { clock.now })
                $0.retry = .never
            })
        do {
            clock.advance(100)
            let stale = try await client.response(Self.get("/gone"))
            #expect(stale.source == .stale)
            // Unreachable: the more particular reason (RFC 9111 §4.2.4) is given.
            #expect(stale.staleReason == .disconnected)
            #expect(stale.value == "good")
            // Without the override the response has no stale-if-error, and with stale answers
            // when disconnected turned off (RFC 9111 §4.2.4, DisconnectedStaleTests) the failure surfaces.
            let error = await expectCourierError {
                _ = try await client.send(Self.get("/gone", policy: CachePolicy.http.servingStaleWhenDisconnected(false)))
            }
            #expect(error?.kind == .transport)
        } catch {
            try? await ahc?.shutdown()
            throw error
        }
        try await ahc?.shutdown()
    }

    // MARK: - §4.4 Invalidation

    @Test(arguments: TransportKind.allCases, [HTTPRequest.Method.post, .put, .delete, HTTPRequest.Method("PURGE")!])
    func anUnsafeMethodInvalidatesItsTargetAndTheSameOriginLocations(_ kind: TransportKind, _ method: HTTPRequest.Method) async throws {
        // RFC 9111 §4.4: a cache MUST invalidate the target URI, and the URIs in Location and
        // Content-Location when they have the same origin, after a non-error response to an unsafe method.
        let counter = Locked(0)
        try await withCache(
            kind,
            handler: { request in
                if request.method != "GET" {
                    return .text(
                        "done", headers: [("Location", "/other"), ("Content-Location", "/third?a=1&b=2"), ("Vary", "Accept-Language")])
                }
                return .text(Self.counted(counter), headers: [("Cache-Control", "max-age=600"), ("Vary", "Accept-Language")])
            }
        ) { client, server, _ in
            let english: HTTPFields = [.acceptLanguage: "en"]
            let french: HTTPFields = [.acceptLanguage: "fr"]
            for path in ["/items", "/other", "/third?a=1&b=2", "/unrelated"] {
                _ = try await client.send(Self.get(path, english))
            }
            _ = try await client.send(Self.get("/items", french))
            #expect(try await client.response(Self.get("/items", french)).source == .cache)
            #expect(server.requests.count == 5)

            _ = try await client.send(Endpoint<String>(method: method, path: "/items", decoding: .string))
            #expect(server.requests.count == 6)
            // Every variant of the target, and both same-origin locations, are gone.
            for (path, headers) in [("/items", english), ("/items", french), ("/other", english), ("/third?a=1&b=2", english)] {
                #expect(try await client.response(Self.get(path, headers)).source == .network, "\(path) \(headers)")
            }
            #expect(try await client.response(Self.get("/unrelated", english)).source == .cache)
        }
    }

    @Test(arguments: TransportKind.allCases, [false, true])
    func anUnsafeMethodSentAsAStreamOrDownloadStillInvalidates(_ kind: TransportKind, download: Bool) async throws {
        // RFC 9111 §4.4 holds for every exchange: a POST whose answer is streamed (server-sent
        // events, a generated file) is not cached, but it still invalidates its target URI.
        let counter = Locked(0)
        try await withCache(
            kind,
            handler: { request in
                request.method == "GET" ? .text(Self.counted(counter), headers: [("Cache-Control", "max-age=600")]) : .text("done")
            }
        ) { client, server, _ in
            _ = try await client.send(Self.get("/items"))
            #expect(try await client.response(Self.get("/items")).source == .cache)
            let post = Endpoint<Data>(method: .post, path: "/items", decoding: .data)
            if download {
                let file = temporaryDirectory("invalidating-download")
                try FileManager.default.createDirectory(at: file, withIntermediateDirectories: true)
                defer { try? FileManager.default.removeItem(at: file) }
                let result = try await client.download(post, to: DownloadDestination(directory: file, fileName: "done")).value
                #expect(result.byteCount == 4)
            } else {
                let stream = try await client.stream(post)
                var received = Data()
                for try await chunk in stream.body { received.append(chunk) }
                #expect(String(decoding: received, as: UTF8.self) == "done")
            }
            #expect(server.requests.count == 2)
            let after = try await client.response(Self.get("/items"))
            #expect(after.source == .network)
            #expect(after.value == "answer 2")
        }
    }

    @Test(arguments: TransportKind.allCases, [300, 202, 303])
    func anUnsafeMethodAnsweredWithoutAnErrorInvalidatesEvenWhenTheRequestFails(_ kind: TransportKind, _ answer: Int) async throws {
        // RFC 9111 §4.4: the MUST holds for any non-error status the unsafe request was answered
        // with, also one the endpoint refuses: a 300 (not followed), a 202 outside the endpoint's
        // 200..<202, and a 303 whose redirect was followed to a 404 (the POST was processed).
        // Sent, then streamed.
        let counter = Locked(0)
        try await withCache(
            kind,
            handler: { request in
                switch (request.method, request.path) {
                case ("GET", "/items"): return .text(Self.counted(counter), headers: [("Cache-Control", "max-age=600")])
                case ("GET", _): return .text("no receipt", status: 404)
                default:
                    let status = Int(request.header("X-Answer") ?? "") ?? 500
                    return .text("done", status: status, headers: status == 303 ? [("Location", "/receipt")] : [])
                }
            }
        ) { client, server, _ in
            let post = Endpoint<Data>(
                method: .post, path: "/items", headers: [HTTPField.Name("X-Answer")!: String(answer)], acceptedStatuses: 200..<202,
                decoding: .data)
            for streamed in [false, true] {
                let stored = try await client.send(Self.get("/items"))
                #expect(try await client.response(Self.get("/items")).source == .cache)
                let sent = server.requests.count
                let error = await expectCourierError {
                    if streamed {
                        let stream = try await client.stream(post)
                        for try await _ in stream.body {}
                    } else {
                        _ = try await client.send(post)
                    }
                }
                #expect(error?.kind == .httpStatus, "streamed: \(streamed)")
                #expect(error?.status?.code == (answer == 303 ? 404 : answer), "streamed: \(streamed)")
                #expect(server.requests.count == sent + (answer == 303 ? 2 : 1), "streamed: \(streamed)")
                let after = try await client.response(Self.get("/items"))
                #expect(after.source == .network, "streamed: \(streamed)")
                #expect(after.value != stored, "streamed: \(streamed)")
            }
        }
    }

    @Test(arguments: TransportKind.allCases)
    func anUnsafeMethodRedirectedToAnAcceptedErrorStillInvalidates(_ kind: TransportKind) async throws {
        // RFC 9111 §4.4: the 303 is a non-error answer to the POST, so the stored GET goes even
        // when the redirect ends at a 404 the endpoint accepts (no error is thrown then, and the
        // final status alone invalidates nothing). Sent, then streamed.
        let counter = Locked(0)
        try await withCache(
            kind,
            handler: { request in
                switch (request.method, request.path) {
                case ("GET", "/items"): return .text(Self.counted(counter), headers: [("Cache-Control", "max-age=600")])
                case ("GET", _): return .text("no receipt", status: 404)
                default: return .text("done", status: 303, headers: [("Location", "/receipt")])
                }
            }
        ) { client, server, _ in
            let post = Endpoint<Data>(method: .post, path: "/items", acceptedStatuses: 200..<500, decoding: .data)
            for streamed in [false, true] {
                let stored = try await client.send(Self.get("/items"))
                #expect(try await client.response(Self.get("/items")).source == .cache)
                let sent = server.requests.count
                if streamed {
                    let stream = try await client.stream(post)
                    #expect(stream.status.code == 404)
                    for try await _ in stream.body {}
                } else {
                    let answer = try await client.response(post)
                    #expect(answer.status.code == 404)
                }
                #expect(server.requests.count == sent + 2, "streamed: \(streamed)")
                let after = try await client.response(Self.get("/items"))
                #expect(after.source == .network, "streamed: \(streamed)")
                #expect(after.value != stored, "streamed: \(streamed)")
            }
        }
    }

    @Test(arguments: TransportKind.allCases)
    func anUnsafeMethodWhoseAnswersBodyFailsStillInvalidates(_ kind: TransportKind) async throws {
        // RFC 9111 §4.4: the server answered the POST with a 201, so the stored GET is invalid,
        // even though the answer's body then stops halfway and the request fails.
        let counter = Locked(0)
        try await withCache(
            kind,
            handler: { request in
                request.method == "GET"
                    ? .text(Self.counted(counter), headers: [("Cache-Control", "max-age=600")])
                    : ScriptedResponse(status: 201, body: Data("created, and more".utf8), behaviour: .closeMidBody(afterBytes: 3))
            }
        ) { client, server, _ in
            let stored = try await client.send(Self.get("/items"))
            #expect(try await client.response(Self.get("/items")).source == .cache)
            let post = Endpoint<Data>(method: .post, path: "/items", decoding: .data)
            let error = await expectCourierError { _ = try await client.send(post) }
            #expect(error?.kind == .transport)
            #expect(server.requests.count == 2)
            let after = try await client.response(Self.get("/items"))
            #expect(after.source == .network)
            #expect(after.value != stored)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func theQueryIsPartOfTheKeyInItsOrder(_ kind: TransportKind) async throws {
        // RFC 9111 §2: the cache key is the target URI; RFC 3986 §6 does not make a reordered
        // query the same URI, and a server may answer `tag=b&tag=a` differently from `tag=a&tag=b`.
        try await withCache(
            kind,
            handler: { request in
                .text(request.uri, headers: [("Cache-Control", "max-age=600")])
            }
        ) { client, server, _ in
            #expect(try await client.send(Self.get("/list?tag=b&tag=a")) == "/list?tag=b&tag=a")
            let other = try await client.response(Self.get("/list?tag=a&tag=b"))
            #expect(other.source == .network)
            #expect(other.value == "/list?tag=a&tag=b")
            #expect(try await client.response(Self.get("/list?tag=b&tag=a")).source == .cache)
            #expect(server.requests.count == 2)
        }
    }

    @Test(arguments: TransportKind.allCases, ["\"v2\"", "W/\"v2\""])
    func aNotModifiedWithAnotherValidatorUpdatesNothingAndTheResourceIsFetched(_ kind: TransportKind, _ tag: String) async throws {
        // RFC 9111 §4.3.4: a 304 whose validator is not the stored response's MUST NOT update
        // it. The caller asked for the resource, so it is fetched without conditions.
        let store = RecordingStore()
        let counter = Locked(0)
        try await withCache(
            kind, store: store,
            handler: { request in
                if request.header("If-None-Match") != nil {
                    return ScriptedResponse(status: 304, headers: [("ETag", tag), ("Cache-Control", "max-age=600")])
                }
                return .text(Self.counted(counter), headers: [("ETag", "\"v1\""), ("Cache-Control", "max-age=1")])
            }
        ) { client, server, clock in
            #expect(try await client.send(Self.get("/tagged")) == "answer 1")
            clock.advance(5)
            let second = try await client.response(Self.get("/tagged"))
            #expect(second.source == .network)
            #expect(second.value == "answer 2")
            let requests = server.requests
            #expect(requests.count == 3)
            #expect(requests.dropFirst().first?.header("If-None-Match") == "\"v1\"")
            #expect(requests.dropFirst(2).first.map { $0.header("If-None-Match") == nil } == true)
            // No stored response ever carried the 304's validator.
            #expect(store.stored.withLock { $0 }.allSatisfy { $0.headers[.eTag] == "\"v1\"" })
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aNotModifiedWithAnotherValidatorAnswersNoCallerOfASharedRevalidation(_ kind: TransportKind) async throws {
        // RFC 9111 §4.3.4, where deduplication meets revalidation: two callers share one
        // conditional request, and its 304 carries another validator. Neither gets the 304 (an
        // empty body for a resource that exists): each asks for the resource without conditions.
        let events = CountingMonitor()
        let counter = Locked(0)
        let server = try await http1Server { request in
            if request.header("If-None-Match") != nil {
                // Answered once the second caller has joined the shared revalidation.
                _ = await eventually { events.count("joined") >= 1 }
                return ScriptedResponse(status: 304, headers: [("ETag", "\"v2\""), ("Cache-Control", "max-age=600")])
            }
            return .text(Self.counted(counter), headers: [("ETag", "\"v1\""), ("Cache-Control", "max-age=0")])
        }
        try await withClient(
            kind, server: server,
            configure: {
                $0.cache = CacheConfiguration(store: MemoryCacheStore())
                $0.eventMonitors = [events]
                $0.retry = .never
            }
        ) { client in
            #expect(try await client.send(Self.get("/tagged")) == "answer 1")
            async let first = client.response(Self.get("/tagged"))
            async let second = client.response(Self.get("/tagged"))
            let answers = try await [first, second]
            // (The unconditional requests that follow may be shared too.)
            #expect(events.count("joined") >= 1)
            #expect(answers.allSatisfy { $0.status.code == 200 && $0.value.hasPrefix("answer ") }, "\(answers.map(\.value))")
            #expect(server.requests.filter { $0.header("If-None-Match") != nil }.count == 1)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aNotModifiedWithTheSameWeakValidatorUpdatesTheStoredResponse(_ kind: TransportKind) async throws {
        // RFC 9111 §4.3.4: a weak validator identifies the stored response that matches it by
        // weak comparison (RFC 9110 §8.8.3.2).
        let counter = Locked(0)
        try await withCache(
            kind,
            handler: { request in
                if request.header("If-None-Match") != nil {
                    return ScriptedResponse(status: 304, headers: [("ETag", "W/\"v1\""), ("Cache-Control", "max-age=600")])
                }
                return .text(Self.counted(counter), headers: [("ETag", "W/\"v1\""), ("Cache-Control", "max-age=1")])
            }
        ) { client, server, clock in
            _ = try await client.send(Self.get("/weak"))
            clock.advance(5)
            let second = try await client.response(Self.get("/weak"))
            #expect(second.source == .revalidated)
            #expect(second.value == "answer 1")
            #expect(server.requests.count == 2)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aStoredStatusTheEndpointDoesNotAcceptIsFetchedAnewNotRevalidated(_ kind: TransportKind) async throws {
        // RFC 9111 §4.3.4: a 304 updates the stored response it confirms, which keeps its status.
        // Another endpoint's stored 404 is no answer for an endpoint that accepts only 2xx, so
        // neither a 304 nor cache-then-network may hand it over: the resource is fetched anew.
        let counter = Locked(0)
        let status = Locked(404)
        try await withCache(
            kind,
            handler: { request in
                if request.header("If-None-Match") != nil {
                    return ScriptedResponse(status: 304, headers: [("ETag", "\"e\""), ("Cache-Control", "max-age=600")])
                }
                let body = Self.counted(counter)
                return .text(body, status: status.withLock { $0 }, headers: [("ETag", "\"e\""), ("Cache-Control", "max-age=1")])
            }
        ) { client, server, clock in
            #expect(try await client.response(Self.get("/gone", accepting: 200..<500)).status == .notFound)
            #expect(try await client.response(Self.get("/other", accepting: 200..<500)).status == .notFound)
            status.withLock { $0 = 200 }
            clock.advance(5)
            let found = try await client.response(Self.get("/gone"))
            #expect(found.status == .ok)
            #expect(found.source == .network)
            #expect(found.value == "answer 3")
            #expect(server.requests.count == 3)
            #expect(server.requests.last?.header("If-None-Match") == nil)
            var sources: [ResponseSource] = []
            for try await response in client.updates(Self.get("/other")) { sources.append(response.source) }
            #expect(sources == [.network])
        }
    }

    @Test(arguments: TransportKind.allCases)
    func anErrorAnswerOrAnotherOriginsLocationInvalidatesNothingElse(_ kind: TransportKind) async throws {
        let counter = Locked(0)
        try await withCache(
            kind,
            handler: { request in
                if request.method == "POST" {
                    return request.path == "/fail"
                        ? .text("no", status: 500, headers: [("Location", "/kept")])
                        : .text(
                            "ok", headers: [("Location", "http://elsewhere.example/kept"), ("Content-Location", "https://127.0.0.1/kept")])
                }
                return .text(Self.counted(counter), headers: [("Cache-Control", "max-age=600")])
            }
        ) { client, _, _ in
            _ = try await client.send(Self.get("/kept"))
            _ = try await client.send(Self.get("/fail"))
            _ = await expectCourierError { _ = try await client.send(Endpoint<String>(method: .post, path: "/fail", decoding: .string)) }
            #expect(try await client.response(Self.get("/fail")).source == .cache)
            _ = try await client.send(Endpoint<String>(method: .post, path: "/ok", decoding: .string))
            #expect(try await client.response(Self.get("/kept")).source == .cache)
        }
    }

    // MARK: - §5.2.1 Request directives

    @Test(arguments: TransportKind.allCases)
    func onlyIfCachedNeverTouchesTheNetwork(_ kind: TransportKind) async throws {
        // RFC 9111 §5.2.1.7: with nothing usable stored the answer is 504, without the network.
        let onlyIfCached: HTTPFields = [.cacheControl: "only-if-cached"]
        try await withCache(
            kind, handler: { request in .text("x", headers: [("Cache-Control", request.path == "/short" ? "max-age=1" : "max-age=60")]) }
        ) { client, server, clock in
            let nothing = await expectCourierError { _ = try await client.send(Self.get("/fresh", onlyIfCached)) }
            #expect(nothing?.kind == .httpStatus)
            #expect(nothing?.status?.code == 504)
            #expect(server.requests.isEmpty)
            // An endpoint that accepts 504 gets the generated response instead of an error.
            let accepted = try await client.response(Self.get("/fresh", onlyIfCached, accepting: 200..<600))
            #expect(accepted.status.code == 504)
            #expect(server.requests.isEmpty)

            _ = try await client.send(Self.get("/fresh"))
            _ = try await client.send(Self.get("/short"))
            clock.advance(10)
            #expect(try await client.response(Self.get("/fresh", onlyIfCached)).source == .cache)
            // Stale and not allowed to be: 504 again, still no request.
            let stale = await expectCourierError { _ = try await client.send(Self.get("/short", onlyIfCached)) }
            #expect(stale?.status?.code == 504)
            // max-stale lets it be served (§5.2.1.2).
            let lenient = try await client.response(Self.get("/short", [.cacheControl: "only-if-cached, max-stale=60"]))
            #expect(lenient.source == .cache)
            #expect(server.requests.count == 2)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func maxStaleMinFreshAndNoCacheFromTheRequestAreHonoured(_ kind: TransportKind) async throws {
        let counter = Locked(0)
        try await withCache(
            kind,
            handler: { request in
                if request.header("If-None-Match") == "\"t\"" {
                    return ScriptedResponse(status: 304, headers: [("ETag", "\"t\""), ("Cache-Control", "max-age=60")])
                }
                return .text(Self.counted(counter), headers: [("Cache-Control", "max-age=60"), ("ETag", "\"t\"")])
            }
        ) { client, server, clock in
            _ = try await client.send(Self.get("/d"))
            clock.advance(50)
            // §5.2.1.3 min-fresh: 10 s of freshness left is less than asked for.
            let minFresh = try await client.response(Self.get("/d", [.cacheControl: "min-fresh=30"]))
            #expect(minFresh.source == .revalidated)
            #expect(server.requests.count == 2)
            clock.advance(70)  // 10 s stale
            // §5.2.1.2 max-stale: 10 s of staleness is within 20.
            #expect(try await client.response(Self.get("/d", [.cacheControl: "max-stale=20"])).source == .cache)
            #expect(try await client.response(Self.get("/d", [.cacheControl: "max-stale=5"])).source == .revalidated)
            #expect(server.requests.count == 3)
            // §5.2.1.4 no-cache: a fresh response is revalidated anyway.
            #expect(try await client.response(Self.get("/d", [.cacheControl: "no-cache"])).source == .revalidated)
            #expect(server.requests.count == 4)
            #expect(server.requests.last?.header("If-None-Match") == "\"t\"")
        }
    }

    // MARK: - Optional behaviours

    @Test(arguments: TransportKind.allCases)
    func aFreshImmutableResponseIsNotRevalidatedOnAReload(_ kind: TransportKind) async throws {
        // RFC 8246 §2: during its freshness an immutable response is not revalidated because a
        // reload asked for a younger one (max-age=0); a forced reload (no-cache) still revalidates.
        try await withCache(
            kind,
            handler: { request in
                let immutable = request.path == "/immutable" ? ", immutable" : ""
                return .text("v", headers: [("Cache-Control", "max-age=600\(immutable)"), ("ETag", "\"i\"")])
            }
        ) { client, server, clock in
            _ = try await client.send(Self.get("/immutable"))
            _ = try await client.send(Self.get("/mutable"))
            clock.advance(1)
            #expect(try await client.response(Self.get("/immutable", [.cacheControl: "max-age=0"])).source == .cache)
            #expect(try await client.response(Self.get("/mutable", [.cacheControl: "max-age=0"])).source == .network)
            #expect(server.requests.count == 3)
            _ = try await client.send(Self.get("/immutable", [.cacheControl: "no-cache"]))
            #expect(server.requests.count == 4)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func onlyIfCachedServesAStaleWhileRevalidateResponseWithoutTheBackgroundRequest(_ kind: TransportKind) async throws {
        // RFC 9111 §5.2.1.7: only-if-cached never reaches the origin, not even in the background.
        try await withCache(
            kind, handler: { _ in .text("v", headers: [("Cache-Control", "max-age=1, stale-while-revalidate=600, stale-if-error=600")]) }
        ) { client, server, clock in
            _ = try await client.send(Self.get("/s"))
            clock.advance(10)
            let answer = try await client.response(Self.get("/s", [.cacheControl: "only-if-cached, max-stale=0"]))
            #expect(answer.value == "v")
            // A normal request after it starts the background revalidation: the only second request.
            let normal = try await client.response(Self.get("/s"))
            #expect(normal.source == .stale)
            #expect(await eventually { server.requests.count == 2 })
            #expect(server.requests.last?.header("Cache-Control") == nil)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aPOSTResponseWithFreshnessAndItsOwnContentLocationAnswersALaterGET(_ kind: TransportKind) async throws {
        // RFC 9110 §9.3.3 and RFC 9111 §4.4: such a response is the representation of its URL.
        try await withCache(
            kind,
            handler: { request in
                if request.method == "POST" {
                    let location = request.path == "/doc" ? "/doc" : "/somewhere-else"
                    return .text("posted", headers: [("Cache-Control", "max-age=60"), ("Content-Location", location)])
                }
                return .text("from GET")
            }
        ) { client, server, _ in
            _ = try await client.send(Endpoint<String>(method: .post, path: "/doc", decoding: .string))
            let answer = try await client.response(Self.get("/doc"))
            #expect(answer.source == .cache)
            #expect(answer.value == "posted")
            _ = try await client.send(Endpoint<String>(method: .post, path: "/other", decoding: .string))
            #expect(try await client.response(Self.get("/other")).value == "from GET")
            #expect(server.requests.count == 3)
            // RFC 9111 §5.2.1.5: a request's no-store keeps its response out of the cache.
            _ = try await client.send(
                Endpoint<String>(method: .post, path: "/doc", headers: [.cacheControl: "no-store"], decoding: .string))
            #expect(try await client.response(Self.get("/doc")).value == "from GET")
            #expect(server.requests.count == 5)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func anUnsafeRequestRedirectedElsewhereInvalidatesWhatItsFinalAnswerSpeaksFor(_ kind: TransportKind) async throws {
        // RFC 9111 §4.4: the target URI of the request that got the answer (the redirect's
        // target, which the POST was sent to again) is invalidated; the answer's
        // Content-Location is relative to that URI, and a URI of another origin than the one
        // that answered (here the first server's /account) is never invalidated by it.
        let counter = Locked(0)
        let other = try await http1Server { request in
            if request.method == "POST" { return .text("done", status: 201, headers: [("Content-Location", "/account")]) }
            return .text(Self.counted(counter), headers: [("Cache-Control", "max-age=600")])
        }
        let elsewhere = other.baseURL.appendingPathComponent("y").absoluteString
        try await withCache(
            kind,
            handler: { request in
                if request.method == "POST" { return ScriptedResponse(status: 307, headers: [("Location", elsewhere)]) }
                return .text(Self.counted(counter), headers: [("Cache-Control", "max-age=600")])
            }
        ) { client, _, _ in
            _ = try await client.send(Self.get("/account"))
            _ = try await client.send(Self.get(elsewhere))
            #expect(try await client.response(Self.get(elsewhere)).source == .cache)
            let posted = try await client.send(Endpoint<String>(method: .post, path: "/x", decoding: .string))
            #expect(posted == "done")
            #expect(other.requests.contains { $0.method == "POST" && $0.path == "/y" })
            #expect(try await client.response(Self.get("/account")).source == .cache)
            #expect(try await client.response(Self.get(elsewhere)).source == .network)
        }
        try await other.stop()
    }

    /// RFC 9111 §4.1: a cache "MUST NOT use that stored response without revalidation unless
    /// all the presented request header fields nominated by that Vary field value match". The
    /// cookie jar sets `Cookie` below the cache, out of the lookup's sight: a response that
    /// varies on it, stored before sign-in (no cookie on either side), was served after sign-in
    /// as if the cookie still matched. It is now revalidated, and the origin answers for the
    /// cookie sent. A client with no jar and no middleware has nothing below the cache that sets
    /// a cookie, and serves it from the cache as before.
    ///
    /// It holds whatever the policy (an app-chosen lifetime ignores no `Vary`), and offline too:
    /// with the origin out of reach, the signed-out answer is not served stale in its place.
    @Test(arguments: TransportKind.allCases, [false, true])
    func aResponseVaryingOnACookieTheJarSetsIsNotServedAfterSignIn(_ kind: TransportKind, appLifetime: Bool) async throws {
        let handler: TestServer.Handler = { request in
            if request.path == "/login" { return .text("signed in", headers: [("Set-Cookie", "session=abc; Path=/")]) }
            return .text(request.header("Cookie") ?? "-", headers: [("Cache-Control", "max-age=600"), ("Vary", "Cookie")])
        }
        let server = try await http1Server(handler)
        try await withClient(
            kind, server: server,
            configure: {
                $0.cache = CacheConfiguration(store: MemoryCacheStore(), policy: appLifetime ? .cacheFor(.seconds(600)) : .http)
                $0.cookies = CookieJar()
                $0.retry = .never
            }
        ) { client in
            #expect(try await client.send(Self.get("/home")) == "-")
            _ = try await client.send(Endpoint<String>(path: "/login", decoding: .string))
            let after = try await client.response(Self.get("/home"))
            #expect(after.value == "session=abc")
            #expect(after.source == .network)
            #expect(server.requests.map(\.path) == ["/home", "/login", "/home"])
            try await server.stop()
            let offline = await expectCourierError { _ = try await client.response(Self.get("/home")) }
            #expect(offline?.kind == .transport)
        }
        let plain = try await http1Server(handler)
        try await withClient(kind, server: plain, configure: { $0.cache = CacheConfiguration(store: MemoryCacheStore(), policy: .http) }) {
            client in
            #expect(try await client.send(Self.get("/home")) == "-")
            let again = try await client.response(Self.get("/home"))
            #expect(again.source == .cache)
            #expect(plain.requests.count == 1)
        }
    }

    /// The same rule for `Authorization`, which a middleware sets below the cache (a client's
    /// or an endpoint's): an answer that varies on it, stored before sign-in, is revalidated
    /// once the middleware sends a credential, and the origin answers for it.
    @Test(arguments: TransportKind.allCases, [false, true])
    func aResponseVaryingOnACredentialAMiddlewareSetsIsNotServedAfterSignIn(_ kind: TransportKind, onEndpoint: Bool) async throws {
        let signedIn = Locked(false)
        let credential = ClosureMiddleware { request, next in
            var request = request
            if signedIn.current { request.head.headerFields[.authorization] = "Bearer t" }
            return try await next(request)
        }
        let server = try await http1Server { request in
            .text(request.header("Authorization") ?? "-", headers: [("Cache-Control", "max-age=600"), ("Vary", "Authorization")])
        }
        var endpoint = Self.get("/me")
        if onEndpoint { endpoint.middleware = [credential] }
        try await withClient(
            kind, server: server,
            configure: {
                $0.cache = CacheConfiguration(store: MemoryCacheStore(), policy: .http)
                if !onEndpoint { $0.middleware = [credential] }
            }
        ) { client in
            #expect(try await client.send(endpoint) == "-")
            signedIn.withLock { $0 = true }
            let after = try await client.response(endpoint)
            #expect(after.value == "Bearer t")
            #expect(after.source == .network)
            #expect(server.requests.count == 2)
        }
    }

    /// RFC 9111 §4.4: a cache "MUST invalidate the target URI" of an unsafe request answered
    /// without an error. Through a 307/308 chain the POST reaches each hop, and each hop's 307
    /// is such an answer: `/b` goes, not only the first URL and the last (before, `/b` stayed).
    @Test(arguments: TransportKind.allCases, [307, 308])
    func anUnsafeRequestInvalidatesEveryHopOfARedirectChainItReached(_ kind: TransportKind, status: Int) async throws {
        let counter = Locked(0)
        try await withCache(
            kind,
            handler: { request in
                if request.method == "POST" {
                    switch request.path {
                    case "/a": return ScriptedResponse(status: status, headers: [("Location", "/b")])
                    case "/b": return ScriptedResponse(status: status, headers: [("Location", "/c")])
                    default: return .text("done", status: 201)
                    }
                }
                return .text(Self.counted(counter), headers: [("Cache-Control", "max-age=600")])
            }
        ) { client, server, _ in
            _ = try await client.send(Self.get("/b"))
            #expect(try await client.response(Self.get("/b")).source == .cache)
            let posted = try await client.send(Endpoint<String>(method: .post, path: "/a", decoding: .string))
            #expect(posted == "done")
            #expect(server.requests.filter { $0.method == "POST" }.map(\.path) == ["/a", "/b", "/c"])
            #expect(try await client.response(Self.get("/b")).source == .network)
            // The same when the chain's answer is one the endpoint does not accept (a 201 where only
            // 200 is): the request fails, and `/b` still goes.
            #expect(try await client.response(Self.get("/b")).source == .cache)
            let refused = await expectCourierError {
                _ = try await client.send(Endpoint<String>(method: .post, path: "/a", acceptedStatuses: 200..<201, decoding: .string))
            }
            #expect(refused?.kind == .httpStatus)
            #expect(try await client.response(Self.get("/b")).source == .network)
        }
    }

    /// RFC 9111 §4.4: "a cache MUST NOT trigger an invalidation ... if the origin of the URI to
    /// be invalidated differs from that of the target URI". A 303 (or a 301 or 302 after a
    /// POST) makes the request a GET: what answers it there is no unsafe request's answer, and the
    /// other origin's stored entries stay (before, any origin a POST was redirected to had its
    /// entries invalidated). The POST's own target URI still goes.
    @Test(arguments: TransportKind.allCases, [303, 302])
    func anUnsafeRequestRedirectedToAnotherOriginAsAGETInvalidatesNothingThere(_ kind: TransportKind, status: Int) async throws {
        let counter = Locked(0)
        let other = try await http1Server { _ in .text(Self.counted(counter), headers: [("Cache-Control", "max-age=600")]) }
        let elsewhere = other.baseURL.appendingPathComponent("y").absoluteString
        try await withCache(
            kind,
            handler: { request in
                if request.method == "POST" { return ScriptedResponse(status: status, headers: [("Location", elsewhere)]) }
                return .text(Self.counted(counter), headers: [("Cache-Control", "max-age=600")])
            }
        ) { client, _, _ in
            let stored = try await client.send(Self.get(elsewhere))
            _ = try await client.send(Self.get("/x"))
            _ = try await client.send(Endpoint<String>(method: .post, path: "/x", decoding: .string))
            #expect(other.requests.map(\.method) == ["GET", "GET"])
            let after = try await client.response(Self.get(elsewhere))
            #expect(after.source == .cache)
            #expect(after.value == stored)
            // The POST's own target URI was invalidated.
            #expect(try await client.response(Self.get("/x")).source == .network)
        }
        try await other.stop()
    }

    @Test(arguments: TransportKind.allCases, [302, 303, 307])
    func aResponseReachedThroughATemporaryRedirectIsNotFreshForTheURLAskedFor(_ kind: TransportKind, status: Int) async throws {
        // RFC 9111 §4: a stored response is reused for its own target URI. The cache keeps the
        // final response of a redirect chain for the URL asked for, and a temporary redirect
        // without freshness of its own may not be reused (RFC 9110 §15.4.3, §15.4.4, §15.4.8):
        // the origin may send elsewhere next time. So every later request asks the origin again;
        // the target's 304 (§4.3.4) still confirms the stored response, and the answer after it
        // is no fresher for the URL asked for.
        let counter = Locked(0)
        try await withCache(
            kind,
            handler: { request in
                if request.path == "/old" { return ScriptedResponse(status: status, headers: [("Location", "/new")]) }
                if request.header("If-None-Match") == "\"v1\"" { return ScriptedResponse(status: 304, headers: [("ETag", "\"v1\"")]) }
                return .text(Self.counted(counter), headers: [("Cache-Control", "max-age=600"), ("ETag", "\"v1\"")])
            }
        ) { client, server, clock in
            #expect(try await client.send(Self.get("/old")) == "answer 1")
            clock.advance(5)
            let second = try await client.response(Self.get("/old"))
            #expect(second.value == "answer 1")
            #expect(second.source == .revalidated)
            let third = try await client.response(Self.get("/old"))
            #expect(third.source == .revalidated)
            #expect(server.requests.map(\.path) == ["/old", "/new", "/old", "/new", "/old", "/new"])
            #expect(counter.current == 1)
        }
    }

    /// A redirect, the freshness it declares, and whether the response it led to is served from
    /// the cache 10 and 40 seconds later (the response itself is fresh for 600).
    struct RedirectFreshnessCase: Sendable, CustomTestStringConvertible {
        var status: Int
        var fields: [(String, String)]
        var freshAt10: Bool
        var freshAt40: Bool
        var target: [(String, String)] = [("Cache-Control", "max-age=600")]
        var testDescription: String {
            "\(self.status) \(self.fields.map { "\($0.0): \($0.1)" }.joined(separator: ", ")) to \(self.target.map { "\($0.0): \($0.1)" }.joined(separator: ", "))"
        }

        static let all: [RedirectFreshnessCase] = [
            .init(status: 301, fields: [], freshAt10: true, freshAt40: true),
            .init(status: 308, fields: [], freshAt10: true, freshAt40: true),
            .init(status: 302, fields: [("Cache-Control", "max-age=30")], freshAt10: true, freshAt40: false),
            .init(status: 307, fields: [("Cache-Control", "max-age=30"), ("Age", "25")], freshAt10: false, freshAt40: false),
            .init(status: 301, fields: [("Cache-Control", "max-age=30")], freshAt10: true, freshAt40: false),
            .init(status: 308, fields: [("Cache-Control", "no-cache")], freshAt10: false, freshAt40: false),
            .init(status: 301, fields: [("Cache-Control", "no-store")], freshAt10: false, freshAt40: false),
            // The limit counts from when the response was stored, not from the response's own
            // age (an object a shared cache has held for 1000 s).
            .init(
                status: 301, fields: [("Cache-Control", "max-age=30")], freshAt10: true, freshAt40: false,
                target: [("Cache-Control", "max-age=3600"), ("Age", "1000")]),
            // A redirect that allows no reuse grants no staleness either (RFC 5861 §3 speaks of
            // the response's own URL).
            .init(
                status: 302, fields: [("Cache-Control", "no-store")], freshAt10: false, freshAt40: false,
                target: [("Cache-Control", "max-age=600, stale-while-revalidate=86400")]),
        ]
    }

    @Test(arguments: TransportKind.allCases, RedirectFreshnessCase.all)
    func aRedirectsOwnFreshnessLimitsTheResponseItLedTo(_ kind: TransportKind, redirect: RedirectFreshnessCase) async throws {
        // RFC 9111 §4.2.1 (the redirect's max-age, less its Age), §5.2.2.4 (no-cache: reused
        // only after asking), §5.2.2.5 (no-store); a permanent redirect without freshness is
        // heuristically cacheable (RFC 9110 §15.4.2, §15.4.9) and limits nothing.
        let counter = Locked(0)
        try await withCache(
            kind,
            handler: { request in
                if request.path == "/old" {
                    return ScriptedResponse(status: redirect.status, headers: [("Location", "/new")] + redirect.fields)
                }
                return .text(Self.counted(counter), headers: redirect.target)
            }
        ) { client, _, clock in
            _ = try await client.send(Self.get("/old"))
            clock.advance(10)
            #expect(try await client.response(Self.get("/old")).source == (redirect.freshAt10 ? .cache : .network))
            guard redirect.freshAt10 else { return }
            clock.advance(30)
            #expect(try await client.response(Self.get("/old")).source == (redirect.freshAt40 ? .cache : .network))
        }
    }

    @Test(arguments: TransportKind.allCases)
    func onlyTheRedirectsOfTheAttemptThatAnsweredLimitTheResponse(_ kind: TransportKind) async throws {
        // The first attempt went through a redirect that allows no reuse and met a 503; the
        // retry was answered directly, fresh for 600 s: the first chain does not speak for it.
        let clock = TestClock()
        let hits = Locked(0)
        let server = try await http1Server { request in
            let hit = hits.withLock {
                $0 += 1
                return $0
            }
            if hit == 1 { return ScriptedResponse(status: 302, headers: [("Location", "/new"), ("Cache-Control", "no-store")]) }
            if hit == 2 { return .text("busy", status: 503, headers: [("Retry-After", "0")]) }
            return .text("direct", headers: [("Cache-Control", "max-age=600")])
        }
        try await withClient(
            kind, server: server, configure: { $0.cache = CacheConfiguration(store: MemoryCacheStore(), now: { clock.now }) }
        ) {
            client in
            let first = try await client.send(Self.get("/old"))
            #expect(first == "direct")
            #expect(server.requests.map(\.path) == ["/old", "/new", "/old"])
            clock.advance(10)
            let second = try await client.response(Self.get("/old"))
            #expect(second.source == .cache)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aHEADThroughARedirectLimitsTheStoredGETItRefreshes(_ kind: TransportKind) async throws {
        // RFC 9111 §4.3.5: a HEAD's answer updates the stored GET response it matches; reached
        // through a redirect that allows no reuse, it leaves that response no fresher for the
        // URL than the redirect allows (§4).
        let redirecting = Locked(false)
        try await withCache(
            kind,
            handler: { request in
                if request.path == "/doc", redirecting.current {
                    return ScriptedResponse(status: 302, headers: [("Location", "/mirror")])
                }
                let fields = [("Cache-Control", "max-age=600"), ("ETag", "\"v1\"")]
                if request.method == "HEAD" { return ScriptedResponse(status: 200, headers: fields + [("Content-Length", "8")]) }
                return .text("document", headers: fields)
            }
        ) { client, server, clock in
            _ = try await client.send(Self.get("/doc"))
            var head = Self.get("/doc")
            head.method = .head
            redirecting.withLock { $0 = true }
            _ = try await client.response(head)
            #expect(server.requests.map(\.path) == ["/doc", "/doc", "/mirror"])
            clock.advance(10)
            // Still stored (its validator is sent to be confirmed), no longer fresh.
            let after = try await client.response(Self.get("/doc"))
            #expect(after.source == .network)
            #expect(server.requests.last?.header("If-None-Match") == "\"v1\"")
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aRequestsMaxStaleDoesNotOverrideARedirectsNoCache(_ kind: TransportKind) async throws {
        // RFC 9111 §5.2.2.4: a response with no-cache is not used without successful validation,
        // whatever staleness the request accepts (§5.2.1.2); a redirect's no-cache holds for the
        // response it led to, kept for the URL asked for.
        let counter = Locked(0)
        try await withCache(
            kind,
            handler: { request in
                if request.path == "/old" {
                    return ScriptedResponse(status: 301, headers: [("Location", "/new"), ("Cache-Control", "no-cache")])
                }
                return .text(Self.counted(counter), headers: [("Cache-Control", "max-age=60")])
            }
        ) { client, server, clock in
            #expect(try await client.send(Self.get("/old")) == "answer 1")
            clock.advance(120)
            let answer = try await client.response(Self.get("/old", [.cacheControl: "max-stale"]))
            #expect(answer.source == .network)
            #expect(answer.value == "answer 2")
            #expect(server.requests.map(\.path) == ["/old", "/new", "/old", "/new"])
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aRedirectThatAllowsLongerKeepsTheResponsesOwnStaleWindow(_ kind: TransportKind) async throws {
        // RFC 5861 §3 with RFC 9111 §4: a permanent redirect fresh for a year limits nothing the
        // response's own 60 s and its stale-while-revalidate window allow.
        let counter = Locked(0)
        try await withCache(
            kind,
            handler: { request in
                if request.path == "/old" {
                    return ScriptedResponse(status: 301, headers: [("Location", "/new"), ("Cache-Control", "max-age=31536000")])
                }
                return .text(Self.counted(counter), headers: [("Cache-Control", "max-age=60, stale-while-revalidate=60")])
            }
        ) { client, _, clock in
            _ = try await client.send(Self.get("/old"))
            clock.advance(90)
            let stale = try await client.response(Self.get("/old"))
            #expect(stale.source == .stale)
            #expect(stale.value == "answer 1")
        }
    }

    @Test(arguments: TransportKind.allCases)
    func cacheThenNetworkDropsAStoredAnswerTheServerNowForbidsStoring(_ kind: TransportKind) async throws {
        // RFC 9111 §5.2.2.5: an answer with `no-store` is not stored, and the older answer it
        // supersedes is not served again: after `updates()` got it from the network, a later
        // request goes to the network too, as it does after a plain request (which drops it).
        let counter = Locked(0)
        let forbid = Locked(false)
        try await withCache(
            kind,
            handler: { _ in .text(Self.counted(counter), headers: [("Cache-Control", forbid.current ? "no-store" : "max-age=600")]) }
        ) { client, server, _ in
            _ = try await client.send(Self.get("/doc"))
            forbid.withLock { $0 = true }
            var sources: [ResponseSource] = []
            for try await update in client.updates(Self.get("/doc")) { sources.append(update.source) }
            #expect(sources == [.cache, .network])
            #expect(try await client.response(Self.get("/doc")).source == .network)
            #expect(server.requests.count == 3)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aPOSTWhoseCallerIgnoresTheBodyStoresNoEmptyCopyForALaterGET(_ kind: TransportKind) async throws {
        // RFC 9111 §3.3: a cache MUST NOT answer with an incomplete response. A POST that decodes
        // nothing has its body discarded unread (as any such POST: it is not read into memory
        // on the chance of a `Content-Location`), so no copy is stored for a later GET (RFC
        // 9110 §9.3.3): the GET goes to the network instead of getting an empty body.
        try await withCache(
            kind,
            handler: { request in
                if request.method == "POST" {
                    return .text("posted", headers: [("Cache-Control", "max-age=60"), ("Content-Location", "/doc")])
                }
                return .text("from GET")
            }
        ) { client, server, _ in
            _ = try await client.response(Endpoint<Void>(method: .post, path: "/doc", decoding: .none))
            let answer = try await client.response(Self.get("/doc"))
            #expect(answer.value == "from GET")
            #expect(answer.source == .network)
            #expect(server.requests.count == 2)
        }
    }

    @Test(arguments: [
        (rule: HeuristicFreshness.standard, daysLater: 0.9, cached: true),  // 10% of 10 days, capped at a day
        (rule: HeuristicFreshness.standard, daysLater: 1.1, cached: false),
        (rule: HeuristicFreshness.none, daysLater: 0.0, cached: false),
        (rule: HeuristicFreshness(fraction: 0.5, limit: .seconds(10 * 86_400)), daysLater: 4.9, cached: true),
        (rule: HeuristicFreshness(fraction: 0.5, limit: .seconds(10 * 86_400)), daysLater: 5.1, cached: false),
        (rule: HeuristicFreshness(fraction: .nan, limit: .seconds(-5)), daysLater: 0.0, cached: false),
    ])
    func heuristicFreshnessIsAConfigurableFractionOfTheTimeSinceLastModified(
        rule: HeuristicFreshness, daysLater: Double, cached: Bool
    ) async throws {
        // RFC 9111 §4.2.2: a cache MAY assign a heuristic lifetime to a response without
        // explicit expiry whose status allows it; Courier's is a fraction of Date − Last-Modified.
        let now = TestClock().now
        let headers = [("Date", imfDate(now)), ("Last-Modified", imfDate(now.addingTimeInterval(-10 * 86_400)))]
        for kind in TransportKind.allCases {
            let counter = Locked(0)
            try await withCache(
                kind, policy: CachePolicy.http.heuristicFreshness(rule), handler: { _ in .text(Self.counted(counter), headers: headers) }
            ) { client, server, clock in
                _ = try await client.send(Self.get("/h"))
                clock.advance(daysLater * 86_400)
                let second = try await client.response(Self.get("/h"))
                #expect(second.source == (cached ? .cache : .network), "\(kind)")
                #expect(server.requests.count == (cached ? 1 : 2), "\(kind)")
            }
        }
    }

    @Test(arguments: TransportKind.allCases)
    func mustUnderstandStoresAnUnderstoodStatusDespiteNoStore(_ kind: TransportKind) async throws {
        // RFC 9111 §5.2.2.3: a cache that understands the status code ignores no-store sent for
        // caches that do not; one it does not understand is not stored.
        let counter = Locked(0)
        try await withCache(
            kind,
            handler: { request in
                let status = request.path == "/created" ? 201 : 200
                return .text(Self.counted(counter), status: status, headers: [("Cache-Control", "max-age=60, no-store, must-understand")])
            }
        ) { client, server, _ in
            _ = try await client.send(Self.get("/ok"))
            #expect(try await client.response(Self.get("/ok")).source == .cache)
            _ = try await client.send(Self.get("/created"))
            #expect(try await client.response(Self.get("/created")).source == .network)
            #expect(server.requests.count == 3)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aHEADResponseUpdatesOrRetiresTheStoredGETResponse(_ kind: TransportKind) async throws {
        // RFC 9111 §4.3.5: a HEAD response with the stored response's validator updates its
        // fields; a different validator means the stored response is outdated.
        let etag = Locked("\"a\"")
        let counter = Locked(0)
        try await withCache(
            kind,
            handler: { request in
                let current = etag.withLock { $0 }
                if request.method == "HEAD" {
                    // The body is not sent (a HEAD response), but gives the Content-Length a GET would have.
                    return ScriptedResponse(
                        status: 200, headers: [("ETag", current), ("Cache-Control", "max-age=60"), ("X-Seen", "head")],
                        body: Data("answer 0".utf8))
                }
                return .text(Self.counted(counter), headers: [("ETag", current), ("Cache-Control", "max-age=60")])
            }
        ) { client, server, _ in
            _ = try await client.send(Self.get("/r"))
            _ = try await client.response(Endpoint<String>(method: .head, path: "/r", decoding: .string))
            let updated = try await client.response(Self.get("/r"))
            #expect(updated.source == .cache)
            #expect(updated.value == "answer 1")
            #expect(updated.headers[HTTPField.Name("X-Seen")!] == "head")

            etag.withLock { $0 = "\"b\"" }
            var head = Endpoint<String>(method: .head, path: "/r", headers: [.cacheControl: "no-cache"], decoding: .string)
            head.name = "HEAD /r, past the stored HEAD response"
            _ = try await client.response(head)
            let refetched = try await client.response(Self.get("/r"))
            #expect(refetched.source == .network)
            #expect(refetched.value == "answer 2")
            #expect(server.requests.count == 4)
        }
    }

    /// RFC 9111 §7: a response that varies on a credential (`Vary: Authorization`) is stored
    /// per credential, and the credential is not written with it: on a disk store its file held
    /// the bearer token in clear (in the variant's key and its varying fields), across restarts.
    @Test(arguments: TransportKind.allCases)
    func aCredentialAResponseVariesOnIsNotWrittenToTheStore(_ kind: TransportKind) async throws {
        let directory = temporaryDirectory("vary-credential")
        defer { try? FileManager.default.removeItem(at: directory) }
        let counter = Locked(0)
        try await withCache(
            kind, store: DiskCacheStore(directory: directory),
            handler: { _ in .text(Self.counted(counter), headers: [("Vary", "Authorization"), ("Cache-Control", "private, max-age=60")]) }
        ) { client, server, _ in
            let token = "Bearer s3cret-T0ken with spaces"
            let first = try await client.response(Self.get("/me", [.authorization: token]))
            #expect(first.source == .network)
            let again = try await client.response(Self.get("/me", [.authorization: token]))
            #expect(again.source == .cache)
            #expect(again.value == first.value)
            let other = try await client.response(Self.get("/me", [.authorization: "Bearer another"]))
            #expect(other.source == .network)
            #expect(server.requests.count == 2)
            var written = Data()
            let files = FileManager.default.enumerator(at: directory, includingPropertiesForKeys: nil)
            while let file = files?.nextObject() as? URL { written += (try? Data(contentsOf: file)) ?? Data() }
            #expect(!written.isEmpty)
            #expect(written.range(of: Data("s3cret-T0ken".utf8)) == nil)
            #expect(written.range(of: Data("another".utf8)) == nil)
        }
    }

    /// A HEAD request under `.networkOnly` leaves the cache alone, as the policy says ("neither
    /// read nor written"): its answer's fields did not refresh the stored GET response.
    @Test(arguments: TransportKind.allCases)
    func aHEADResponseUnderNetworkOnlyRefreshesNothing(_ kind: TransportKind) async throws {
        let counter = Locked(0)
        try await withCache(
            kind,
            handler: { request in
                if request.method == "HEAD" {
                    return ScriptedResponse(
                        status: 200, headers: [("ETag", "\"a\""), ("Cache-Control", "max-age=60"), ("X-Seen", "head")],
                        body: Data("answer 0".utf8))
                }
                return .text(Self.counted(counter), headers: [("ETag", "\"a\""), ("Cache-Control", "max-age=60")])
            }
        ) { client, server, _ in
            _ = try await client.send(Self.get("/r"))
            var head = Endpoint<String>(method: .head, path: "/r", decoding: .string)
            head.cachePolicy = .networkOnly
            _ = try await client.response(head)
            #expect(server.requests.count == 2)
            let stored = try await client.response(Self.get("/r"))
            #expect(stored.source == .cache)
            #expect(stored.value == "answer 1")
            #expect(stored.headers[HTTPField.Name("X-Seen")!] == nil)
        }
    }

    // MARK: - §4.3.1 Validators

    @Test(
        arguments: TransportKind.allCases, ["\"plain\"", "W/\"weak tag\"", "unquoted-invalid", "\"with \\\\ backslash\"", "\"\"", "W/\"\""])
    func anETagIsSentBackByteForByte(_ kind: TransportKind, _ tag: String) async throws {
        // RFC 9111 §4.3.1: the stored entity tag goes in If-None-Match as received.
        try await withCache(
            kind,
            handler: { request in
                if request.header("If-None-Match") != nil { return ScriptedResponse(status: 304, headers: [("ETag", tag)]) }
                return .text("tagged", headers: [("ETag", tag), ("Cache-Control", "max-age=0")])
            }
        ) { client, server, _ in
            _ = try await client.send(Self.get("/t"))
            let second = try await client.response(Self.get("/t"))
            #expect(second.source == .revalidated)
            #expect(server.requests.last?.header("If-None-Match") == tag)
        }
    }
}
