import Courier
import Foundation
import HTTPTypes
import Testing

/// Builds header fields from pairs.
func fields(_ pairs: [(String, String)]) -> HTTPFields {
    var fields = HTTPFields()
    for (name, value) in pairs { fields.append(HTTPField(name: HTTPField.Name(name)!, value: value)) }
    return fields
}

@Suite("Cache decisions are plain values (RFC 9111)")
struct CacheRulesTests {
    /// The instant every table row is judged at.
    static let now = Date(timeIntervalSince1970: 1_800_000_000)
    static func httpDate(_ offset: TimeInterval) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return formatter.string(from: now.addingTimeInterval(offset))
    }

    /// An entry received `receivedAgo` seconds before `now`, with the given response fields.
    static func entry(
        _ headers: [(String, String)], receivedAgo: TimeInterval, status: Int = 200, varying: [String: String?] = [:]
    ) -> CacheEntry {
        CacheEntry(
            url: "https://a/x", method: "GET", partition: "", status: status, headers: fields(headers), body: Data("x".utf8),
            requestDate: now.addingTimeInterval(-receivedAgo), responseDate: now.addingTimeInterval(-receivedAgo), varyingFields: varying
        )
    }

    struct Row: Sendable, CustomTestStringConvertible {
        var name: String
        var policy: CachePolicy = .http
        var method: HTTPRequest.Method = .get
        var request: [(String, String)] = []
        var response: [(String, String)]
        var receivedAgo: TimeInterval
        var expected: Expected
        var testDescription: String { self.name }
    }

    enum Expected: Sendable, Equatable {
        case serve
        case revalidate(etag: String?, modified: String?)
        case fetch
    }

    static let rows: [Row] = [
        Row(name: "max-age fresh", response: [("Cache-Control", "max-age=60")], receivedAgo: 59, expected: .serve),
        Row(name: "max-age stale without validator", response: [("Cache-Control", "max-age=60")], receivedAgo: 61, expected: .fetch),
        Row(
            name: "max-age stale with ETag", response: [("Cache-Control", "max-age=60"), ("ETag", "\"v1\"")], receivedAgo: 61,
            expected: .revalidate(etag: "\"v1\"", modified: nil)),
        Row(
            name: "stale with Last-Modified", response: [("Cache-Control", "max-age=1"), ("Last-Modified", httpDate(-1000))],
            receivedAgo: 61, expected: .revalidate(etag: nil, modified: httpDate(-1000))),
        Row(
            name: "Age header counts toward age", response: [("Cache-Control", "max-age=60"), ("Age", "50")], receivedAgo: 11,
            expected: .fetch),
        Row(
            name: "Age header within lifetime", response: [("Cache-Control", "max-age=60"), ("Age", "40")], receivedAgo: 11,
            expected: .serve),
        Row(
            name: "s-maxage ignored by a private cache", response: [("Cache-Control", "s-maxage=600, max-age=10")], receivedAgo: 20,
            expected: .fetch),
        Row(
            name: "s-maxage alone gives no freshness", response: [("Cache-Control", "s-maxage=600"), ("ETag", "e")], receivedAgo: 1,
            expected: .revalidate(etag: "e", modified: nil)),
        Row(
            name: "Expires minus Date, fresh", response: [("Date", httpDate(-30)), ("Expires", httpDate(30))], receivedAgo: 30,
            expected: .serve),
        Row(
            name: "Expires minus Date, stale", response: [("Date", httpDate(-90)), ("Expires", httpDate(-30))], receivedAgo: 90,
            expected: .fetch),
        Row(
            name: "invalid Expires means expired", response: [("Expires", "0"), ("ETag", "e")], receivedAgo: 0,
            expected: .revalidate(etag: "e", modified: nil)),
        Row(
            name: "max-age beats Expires",
            response: [("Cache-Control", "max-age=100"), ("Date", httpDate(-50)), ("Expires", httpDate(-40))], receivedAgo: 50,
            expected: .serve),
        Row(
            name: "no-cache response is revalidated even when fresh",
            response: [("Cache-Control", "no-cache, max-age=600"), ("ETag", "e")], receivedAgo: 1,
            expected: .revalidate(etag: "e", modified: nil)),
        Row(
            name: "request no-cache revalidates", request: [("Cache-Control", "no-cache")],
            response: [("Cache-Control", "max-age=600"), ("ETag", "e")], receivedAgo: 1, expected: .revalidate(etag: "e", modified: nil)),
        Row(
            name: "request Pragma no-cache revalidates", request: [("Pragma", "no-cache")],
            response: [("Cache-Control", "max-age=600"), ("ETag", "e")], receivedAgo: 1, expected: .revalidate(etag: "e", modified: nil)),
        Row(
            name: "request max-age=0 revalidates", request: [("Cache-Control", "max-age=0")],
            response: [("Cache-Control", "max-age=600"), ("ETag", "e")], receivedAgo: 1, expected: .revalidate(etag: "e", modified: nil)),
        Row(
            name: "request min-fresh", request: [("Cache-Control", "min-fresh=100")], response: [("Cache-Control", "max-age=600")],
            receivedAgo: 550, expected: .fetch),
        Row(
            name: "request no-store bypasses", request: [("Cache-Control", "no-store")], response: [("Cache-Control", "max-age=600")],
            receivedAgo: 1, expected: .fetch),
        Row(
            name: "max-stale serves a stale response", request: [("Cache-Control", "max-stale=120")],
            response: [("Cache-Control", "max-age=60")], receivedAgo: 100, expected: .serve),
        Row(
            name: "max-stale limit exceeded", request: [("Cache-Control", "max-stale=10")], response: [("Cache-Control", "max-age=60")],
            receivedAgo: 100, expected: .fetch),
        Row(
            name: "must-revalidate overrides max-stale", request: [("Cache-Control", "max-stale")],
            response: [("Cache-Control", "max-age=60, must-revalidate"), ("ETag", "e")], receivedAgo: 100,
            expected: .revalidate(etag: "e", modified: nil)),
        Row(
            name: "private is stored and served by a private cache", response: [("Cache-Control", "private, max-age=60")], receivedAgo: 1,
            expected: .serve),
        Row(
            name: "heuristic: 10% of Last-Modified age, fresh", response: [("Date", httpDate(-10)), ("Last-Modified", httpDate(-1010))],
            receivedAgo: 10, expected: .serve),
        Row(
            name: "heuristic: 10% of Last-Modified age, stale", response: [("Date", httpDate(-200)), ("Last-Modified", httpDate(-1200))],
            receivedAgo: 200, expected: .revalidate(etag: nil, modified: httpDate(-1200))),
        Row(
            name: "no freshness information: revalidate", response: [("ETag", "e")], receivedAgo: 0,
            expected: .revalidate(etag: "e", modified: nil)),
        Row(
            name: "a conditional request bypasses the cache", request: [("If-None-Match", "\"mine\"")],
            response: [("Cache-Control", "max-age=600")], receivedAgo: 1, expected: .fetch),
        Row(
            name: "cache else network serves however old", policy: .cacheElseNetwork, response: [("Cache-Control", "no-cache, max-age=0")],
            receivedAgo: 86400 * 365, expected: .serve),
        Row(
            name: "cache for a duration, inside it", policy: .cacheFor(.seconds(60)), response: [("Cache-Control", "no-cache")],
            receivedAgo: 59, expected: .serve),
        Row(
            name: "cache for a duration, past it", policy: .cacheFor(.seconds(60)), response: [("Cache-Control", "max-age=600")],
            receivedAgo: 61, expected: .fetch),
        Row(
            name: "cache for a duration, past it, with validator", policy: .cacheFor(.seconds(60)), response: [("ETag", "e")],
            receivedAgo: 61, expected: .revalidate(etag: "e", modified: nil)),
        Row(
            name: "network only never serves", policy: .networkOnly, response: [("Cache-Control", "max-age=600")], receivedAgo: 1,
            expected: .fetch),
        Row(
            name: "POST without opt-in never served", method: .post, response: [("Cache-Control", "max-age=600")], receivedAgo: 1,
            expected: .fetch),
        Row(
            name: "POST with opt-in served", policy: CachePolicy.http.allowingAnyMethod(), method: .post,
            response: [("Cache-Control", "max-age=600")], receivedAgo: 1, expected: .serve),
        Row(name: "Vary * is never reused", policy: .cacheElseNetwork, response: [("Vary", "*")], receivedAgo: 1, expected: .fetch),
    ]

    @Test(arguments: rows)
    func decision(_ row: Row) {
        let entry = Self.entry(row.response, receivedAgo: row.receivedAgo)
        let action = CacheRules.action(
            policy: row.policy, method: row.method, requestHeaders: fields(row.request), entry: entry, now: Self.now)
        switch (action, row.expected) {
        case (.serve, .serve), (.fetch, .fetch):
            break
        case (.revalidate(let conditions), .revalidate(let etag, let modified)):
            #expect(conditions[.ifNoneMatch] == etag)
            #expect(conditions[.ifModifiedSince] == modified)
        default:
            Issue.record("\(row.name): expected \(row.expected), got \(action)")
        }
    }

    @Test
    func httpDatesInAllThreeFormsAndNothingElse() {
        let expected = Date(timeIntervalSince1970: 784_111_777)  // Sun, 06 Nov 1994 08:49:37 GMT
        #expect(HTTPDate.parse("Sun, 06 Nov 1994 08:49:37 GMT") == expected)
        #expect(HTTPDate.parse("Sunday, 06-Nov-94 08:49:37 GMT") == expected)
        #expect(HTTPDate.parse("Sun Nov  6 08:49:37 1994") == expected)
        #expect(HTTPDate.parse("Thu, 29 Feb 2024 23:59:59 GMT") == Date(timeIntervalSince1970: 1_709_251_199))
        #expect(HTTPDate.parse("0") == nil)
        #expect(HTTPDate.parse("Sun, 06 Foo 1994 08:49:37 GMT") == nil)
        #expect(HTTPDate.parse("Sun, 06 Nov 1994 25:49:37 GMT") == nil)
    }

    @Test
    func nothingStoredMeansFetch() {
        #expect(CacheRules.action(policy: .cacheElseNetwork, method: .get, requestHeaders: [:], entry: nil, now: Self.now) == .fetch)
    }

    @Test
    func ageFollowsTheRFCsCorrectedInitialAgePlusResidentTime() {
        // Sent at t-12, answered at t-10 with Age: 5 and a Date 3 s before arrival.
        let entry = CacheEntry(
            url: "u", method: "GET", partition: "", status: 200, headers: fields([("Age", "5"), ("Date", Self.httpDate(-13))]),
            body: Data(),
            requestDate: Self.now.addingTimeInterval(-12), responseDate: Self.now.addingTimeInterval(-10)
        )
        // apparent age 3, corrected age value 5 + 2 = 7, resident 10 → 17.
        #expect(CacheRules.age(of: entry, now: Self.now) == 17)
    }

    @Test
    func heuristicFreshnessIsCappedAtADayAndNeedsACacheableStatus() {
        let old = Self.entry([("Date", Self.httpDate(0)), ("Last-Modified", Self.httpDate(-86400 * 100))], receivedAgo: 0)
        #expect(CacheRules.freshnessLifetime(of: old) == 86400)
        let created = Self.entry([("Date", Self.httpDate(0)), ("Last-Modified", Self.httpDate(-1000))], receivedAgo: 0, status: 201)
        #expect(CacheRules.freshnessLifetime(of: created) == 0)
        let public201 = Self.entry(
            [("Cache-Control", "public"), ("Date", Self.httpDate(0)), ("Last-Modified", Self.httpDate(-1000))], receivedAgo: 0, status: 201)
        #expect(CacheRules.freshnessLifetime(of: public201) == 100)
    }

    struct StoreRow: Sendable, CustomTestStringConvertible {
        var name: String
        var policy: CachePolicy = .http
        var method: HTTPRequest.Method = .get
        var request: [(String, String)] = []
        var status = 200
        var response: [(String, String)]
        var stored: Bool
        var testDescription: String { self.name }
    }

    static let storeRows: [StoreRow] = [
        StoreRow(name: "max-age", response: [("Cache-Control", "max-age=60")], stored: true),
        StoreRow(name: "private", response: [("Cache-Control", "private, max-age=60")], stored: true),
        StoreRow(name: "response no-store", response: [("Cache-Control", "no-store, max-age=60")], stored: false),
        StoreRow(
            name: "request no-store", request: [("Cache-Control", "no-store")], response: [("Cache-Control", "max-age=60")], stored: false),
        StoreRow(name: "Vary *", response: [("Cache-Control", "max-age=60"), ("Vary", "*")], stored: false),
        StoreRow(name: "Vary on a field", response: [("Cache-Control", "max-age=60"), ("Vary", "Accept-Language")], stored: true),
        StoreRow(name: "no freshness, no validator: useless", response: [], stored: false),
        StoreRow(name: "no freshness, ETag: kept for revalidation", response: [("ETag", "e")], stored: true),
        // RFC 9110 §6.6.1: without `Date`, the response is dated when received.
        StoreRow(name: "Expires past, no Date, no validator: useless", response: [("Expires", httpDate(-3600))], stored: false),
        StoreRow(name: "Expires ahead, no Date: stored", response: [("Expires", httpDate(3600))], stored: true),
        StoreRow(name: "500 without explicit freshness", status: 500, response: [("ETag", "e")], stored: false),
        StoreRow(name: "500 with max-age", status: 500, response: [("Cache-Control", "max-age=5")], stored: true),
        StoreRow(name: "404 is heuristically cacheable", status: 404, response: [("ETag", "e")], stored: true),
        StoreRow(
            name: "206 without Content-Range or validator is not stored", status: 206, response: [("Cache-Control", "max-age=60")],
            stored: false),
        StoreRow(
            name: "206 with its range and a strong ETag is stored (RFC 9111 §3.3)", status: 206,
            response: [("Cache-Control", "max-age=60"), ("Content-Range", "bytes 0-9/100"), ("ETag", "\"p\"")], stored: true),
        StoreRow(
            name: "206 with only a weak ETag is not stored", status: 206,
            response: [("Cache-Control", "max-age=60"), ("Content-Range", "bytes 0-9/100"), ("ETag", "W/\"p\"")], stored: false),
        StoreRow(
            name: "206 with a weak ETag and a Last-Modified is not stored (RFC 9110 §13.1.5)", status: 206,
            response: [
                ("Cache-Control", "max-age=60"), ("Content-Range", "bytes 0-9/100"), ("ETag", "W/\"p\""),
                ("Last-Modified", httpDate(-86400)), ("Date", httpDate(0)),
            ], stored: false),
        StoreRow(
            name: "206 with a Last-Modified a day before its Date is stored (strong, RFC 9110 §8.8.2.2)", status: 206,
            response: [
                ("Cache-Control", "max-age=60"), ("Content-Range", "bytes 0-9/100"), ("Last-Modified", httpDate(-86400)),
                ("Date", httpDate(0)),
            ], stored: true),
        StoreRow(
            name: "206 with a Last-Modified 10 s before its Date is not stored (weak)", status: 206,
            response: [
                ("Cache-Control", "max-age=60"), ("Content-Range", "bytes 0-9/100"), ("Last-Modified", httpDate(-10)),
                ("Date", httpDate(0)),
            ], stored: false),
        StoreRow(
            name: "206 of a content-coded body is not stored", status: 206,
            response: [
                ("Cache-Control", "max-age=60"), ("Content-Range", "bytes 0-9/100"), ("ETag", "\"p\""), ("Content-Encoding", "gzip"),
            ], stored: false),
        StoreRow(name: "POST not opted in", method: .post, response: [("Cache-Control", "max-age=60")], stored: false),
        StoreRow(
            name: "POST opted in", policy: CachePolicy.cacheFor(.seconds(30)).allowingAnyMethod(), method: .post, response: [], stored: true
        ),
        StoreRow(name: "network only", policy: .networkOnly, response: [("Cache-Control", "max-age=60")], stored: false),
        StoreRow(name: "app policy stores a 2xx without headers", policy: .cacheElseNetwork, response: [], stored: true),
        StoreRow(
            name: "app policy does not store an error", policy: .cacheElseNetwork, status: 404, response: [("Cache-Control", "max-age=60")],
            stored: false),
        StoreRow(
            name: "app policy respects no-store", policy: .cacheFor(.seconds(60)), response: [("Cache-Control", "no-store")], stored: false),
        StoreRow(
            name: "a ranged request answered in full is stored", request: [("Range", "bytes=0-9")],
            response: [("Cache-Control", "max-age=60")], stored: true),
        StoreRow(
            name: "a request for several ranges is not stored", request: [("Range", "bytes=0-9,20-29")],
            response: [("Cache-Control", "max-age=60")], stored: false),
        StoreRow(
            name: "a request with If-Range is not stored", request: [("Range", "bytes=0-9"), ("If-Range", "\"p\"")],
            response: [("Cache-Control", "max-age=60")], stored: false),
    ]

    @Test(arguments: storeRows)
    func storability(_ row: StoreRow) {
        let stored = CacheRules.mayStore(
            policy: row.policy, method: row.method, requestHeaders: fields(row.request), status: row.status,
            responseHeaders: fields(row.response), received: Self.now)
        #expect(stored == row.stored)
    }

    /// RFC 9111 §4.3.4: a 304 selects the stored response whose validator it carries. One with
    /// only a `Last-Modified` that the stored response (validated by its `ETag`) lacks selects
    /// none; it refreshed the stored response with another's fields. A 304 with no validator at
    /// all still answers the one stored response it was asked about (a careless server's).
    @Test
    func a304WithADateTheStoredResponseLacksIdentifiesNothing() {
        let tagged = Self.entry([("ETag", #""v1""#), ("Cache-Control", "max-age=0")], receivedAgo: 10)
        let dated = Self.entry([("Last-Modified", Self.httpDate(-3600)), ("Cache-Control", "max-age=0")], receivedAgo: 10)
        #expect(!CacheRules.notModified(fields([("Last-Modified", Self.httpDate(-60))]), identifies: tagged))
        #expect(CacheRules.notModified(fields([("Last-Modified", Self.httpDate(-3600))]), identifies: dated))
        #expect(!CacheRules.notModified(fields([("Last-Modified", Self.httpDate(-60))]), identifies: dated))
        #expect(CacheRules.notModified(fields([("ETag", #""v1""#)]), identifies: tagged))
        #expect(!CacheRules.notModified(fields([("ETag", #""v2""#)]), identifies: tagged))
        #expect(CacheRules.notModified(fields([("Cache-Control", "max-age=60")]), identifies: tagged))
    }

    @Test
    func varyMatchesOnlyTheSameFieldValues() {
        let response = fields([("Vary", "Accept-Language, Accept-Encoding")])
        let varying = CacheRules.varyingFields(responseHeaders: response, requestHeaders: fields([("Accept-Language", "en")]))
        // The value's SHA-256 digest, never the value (which may be a credential, RFC 9111 §7).
        let expected: [String: String?] = [
            "accept-language": "sha256:dbd3a49d0d906b4ed9216b73330d2fb080ef2f758c12f3885068222e5e17151c", "accept-encoding": String?.none,
        ]
        #expect(varying == expected)
        let entry = CacheEntry(
            url: "u", method: "GET", partition: "", status: 200, headers: response, body: Data(), requestDate: Self.now,
            responseDate: Self.now, varyingFields: varying)
        #expect(CacheRules.matchesVary(entry, requestHeaders: fields([("Accept-Language", "en")])))
        #expect(!CacheRules.matchesVary(entry, requestHeaders: fields([("Accept-Language", "fr")])))
        #expect(!CacheRules.matchesVary(entry, requestHeaders: fields([("Accept-Language", "en"), ("Accept-Encoding", "gzip")])))
        #expect(!CacheRules.matchesVary(entry, requestHeaders: [:]))
    }

    @Test
    func a304RefreshesHeadersButKeepsTheBodyAndLength() {
        let entry = Self.entry(
            [("Cache-Control", "max-age=1"), ("ETag", "\"v1\""), ("Content-Length", "1"), ("X-Kept", "yes")], receivedAgo: 100)
        let refreshed = CacheRules.refreshed(
            entry, notModified: fields([("Cache-Control", "max-age=300"), ("ETag", "\"v1\""), ("Content-Length", "0")]),
            requestDate: Self.now, responseDate: Self.now
        )
        #expect(refreshed.body == entry.body)
        #expect(refreshed.headers[.cacheControl] == "max-age=300")
        #expect(refreshed.headers[.contentLength] == "1")
        #expect(refreshed.headers[HTTPField.Name("X-Kept")!] == "yes")
        #expect(refreshed.headers[values: .eTag].count == 1)
        #expect(CacheRules.action(policy: .http, method: .get, requestHeaders: [:], entry: refreshed, now: Self.now) == .serve(age: 0))
    }

    @Test(arguments: [
        (HTTPRequest.Method.post, 201, true), (.put, 204, true), (.delete, 200, true), (.patch, 302, true),
        (.post, 500, false), (.post, 404, false), (.get, 200, false), (.head, 200, false), (.options, 200, false),
    ])
    func unsafeMethodsInvalidateOnSuccess(method: HTTPRequest.Method, status: Int, invalidates: Bool) {
        #expect(CacheRules.invalidates(method: method, status: status, policy: .http) == invalidates)
        #expect(!CacheRules.invalidates(method: method, status: status, policy: CachePolicy.http.allowingAnyMethod()))
    }
}
