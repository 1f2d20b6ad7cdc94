import Courier
import CourierAsyncHTTPClient
import CourierTestServer
import Foundation
import HTTPTypes
import InMemoryLogging
import Logging
import Testing

/// A wall clock the test moves by hand.
final class TestClock: Sendable {
    private let current: Locked<Date>
    init(start: Date = Date(timeIntervalSince1970: 1_800_000_000)) { self.current = Locked(start) }
    var now: Date { self.current.withLock { $0 } }
    func advance(_ seconds: TimeInterval) { self.current.withLock { $0 = $0.addingTimeInterval(seconds) } }
}

/// An origin with cache-related routes; every answer carries a serial number, so a test can
/// tell a stored answer from a new one.
final class CacheOrigin: Sendable {
    private let serial = Locked(0)
    /// The ETag the `/etag` route's resource has now.
    let version = Locked("v1")
    static let lastModified = "Sat, 01 Jan 2022 00:00:00 GMT"

    func next() -> Int {
        self.serial.withLock {
            $0 += 1
            return $0
        }
    }

    func handle(_ request: RecordedRequest) async -> ScriptedResponse {
        let path = request.path
        let language = request.header("Accept-Language") ?? "none"
        func article(_ headers: [(String, String)], status: Int = 200) -> ScriptedResponse {
            let body = "{\"id\":\(self.next()),\"title\":\"\(request.method) \(path) \(language)\"}"
            return .json(body, status: status, headers: headers)
        }
        switch path {
        case "/max-age":
            return article([("Cache-Control", "max-age=60")])
        case "/etag":
            let etag = "\"\(self.version.withLock { $0 })\""
            if request.header("If-None-Match") == etag {
                _ = self.next()
                return ScriptedResponse(status: 304, headers: [("ETag", etag), ("Cache-Control", "max-age=30"), ("X-Refreshed", "yes")])
            }
            return article([("ETag", etag), ("Cache-Control", "max-age=10")])
        case "/last-modified":
            if request.header("If-Modified-Since") == Self.lastModified {
                _ = self.next()
                return ScriptedResponse(status: 304, headers: [("Cache-Control", "no-cache")])
            }
            return article([("Last-Modified", Self.lastModified), ("Cache-Control", "no-cache")])
        case "/swr":
            return article([("Cache-Control", "max-age=1, stale-while-revalidate=600")])
        case "/no-store":
            return article([("Cache-Control", "no-store, max-age=60")])
        case "/vary":
            return article([("Cache-Control", "max-age=60"), ("Vary", "Accept-Language")])
        case "/vary-etag":
            let etag = "\"\(language)\""
            if request.header("If-None-Match") == etag {
                _ = self.next()
                return ScriptedResponse(
                    status: 304, headers: [("ETag", etag), ("Cache-Control", "max-age=30"), ("Vary", "Accept-Language")])
            }
            return article([("Cache-Control", "max-age=10"), ("ETag", etag), ("Vary", "Accept-Language")])
        case "/vary-star":
            return article([("Cache-Control", "max-age=60"), ("Vary", "*")])
        case "/plain":
            return article([])
        case "/once":
            return self.serial.withLock { $0 } == 0 ? article([]) : .text("unavailable", status: 503)
        case "/search":
            return article([])
        case "/items":
            return request.method == "GET" ? article([("Cache-Control", "max-age=60")]) : article([], status: 201)
        default:
            return .text("not found", status: 404)
        }
    }
}

@Suite("Response cache, end to end")
struct CacheTests {
    /// Runs `body` with a client whose cache uses `store` and a hand-moved clock.
    func withCachingClient(
        _ kind: TransportKind = .asyncHTTPClient,
        store: any CacheStore = MemoryCacheStore(),
        policy: CachePolicy = .http,
        partition: Locked<String> = Locked(""),
        logger: Logger? = nil,
        _ body: (Client, TestServer, TestClock, CacheOrigin) async throws -> Void
    ) async throws {
        let origin = CacheOrigin()
        let clock = TestClock()
        let server = try await http1Server { await origin.handle($0) }
        try await withClient(
            kind, server: server,
            configure: {
                $0.cache = CacheConfiguration(store: store, policy: policy, partition: { partition.withLock { $0 } }, now: { clock.now })
                $0.logger = logger
            }
        ) { client in
            try await body(client, server, clock, origin)
        }
    }

    static func article(_ path: String, policy: CachePolicy? = nil, headers: HTTPFields = [:]) -> Endpoint<Article> {
        var endpoint = Endpoint<Article>(path: path, headers: headers)
        endpoint.cachePolicy = policy
        return endpoint
    }

    @Test(arguments: TransportKind.allCases)
    func freshResponsesAreServedAndStaleOnesRevalidatedWithIfNoneMatch(_ kind: TransportKind) async throws {
        try await withCachingClient(kind) { client, server, clock, _ in
            let first = try await client.response(Self.article("/etag"))
            #expect(first.source == .network)
            clock.advance(5)
            let second = try await client.response(Self.article("/etag"))
            #expect(second.source == .cache)
            #expect(second.value == first.value)
            #expect(second.age == .seconds(5))
            #expect(server.requests.count == 1)

            clock.advance(10)  // 15 s old, max-age=10: stale
            let third = try await client.response(Self.article("/etag"))
            #expect(third.source == .revalidated)
            #expect(third.value == first.value)
            #expect(third.status.code == 200)
            #expect(third.headers[HTTPField.Name("X-Refreshed")!] == "yes")
            #expect(server.requests.count == 2)
            #expect(server.requests.last?.header("If-None-Match") == "\"v1\"")

            // The 304 brought max-age=30: fresh again for 30 s.
            clock.advance(20)
            let fourth = try await client.response(Self.article("/etag"))
            #expect(fourth.source == .cache)
            #expect(server.requests.count == 2)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func cancelAllReachesABackgroundRevalidationHeldBySuspension(_ kind: TransportKind) async throws {
        // A stale answer served while the client is suspended leaves its revalidation (RFC 5861)
        // waiting for a slot; `cancelAll` must end it, not let it go to the network on resume.
        try await withCachingClient(kind) { client, server, clock, _ in
            _ = try await client.send(Self.article("/swr"))
            clock.advance(70)
            client.suspend()
            let stale = try await client.response(Self.article("/swr"))
            #expect(stale.source == .stale)
            #expect(await eventually { client.traffic.queued == 1 })
            #expect(client.cancelAll(reason: "signing out") == 1)
            #expect(await eventually { client.traffic.queued == 0 })
            client.resume()
            _ = try await client.send(Self.article("/plain"))
            #expect(server.requests.map(\.path) == ["/swr", "/plain"])
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aChangedResourceReplacesTheStoredOne(_ kind: TransportKind) async throws {
        try await withCachingClient(kind) { client, server, clock, origin in
            let first = try await client.send(Self.article("/etag"))
            origin.version.withLock { $0 = "v2" }
            clock.advance(11)
            let second = try await client.response(Self.article("/etag"))
            #expect(second.source == .network)
            #expect(second.value.id != first.id)
            let third = try await client.response(Self.article("/etag"))
            #expect(third.source == .cache)
            #expect(third.value == second.value)
            #expect(server.requests.count == 2)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func lastModifiedRevalidatesWithIfModifiedSinceEveryTimeUnderNoCache(_ kind: TransportKind) async throws {
        try await withCachingClient(kind) { client, server, _, _ in
            let first = try await client.response(Self.article("/last-modified"))
            let second = try await client.response(Self.article("/last-modified"))
            #expect(first.source == .network)
            #expect(second.source == .revalidated)
            #expect(second.value == first.value)
            #expect(server.requests.count == 2)
            #expect(server.requests.last?.header("If-Modified-Since") == CacheOrigin.lastModified)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func noStoreIsNeverStored(_ kind: TransportKind) async throws {
        let store = MemoryCacheStore()
        try await withCachingClient(kind, store: store) { client, server, _, _ in
            let first = try await client.response(Self.article("/no-store"))
            let second = try await client.response(Self.article("/no-store", policy: .cacheElseNetwork))
            #expect(first.source == .network)
            #expect(second.source == .network)
            #expect(first.value != second.value)
            #expect(server.requests.count == 2)
            #expect(store.count == 0)
        }
    }

    // AsyncHTTPClient only: on Linux FoundationNetworking adds `Accept-Language` from the locale
    // to a request without one, so "no Accept-Language" cannot be sent over URLSessionTransport
    // (README, platforms and transports: "fields the platform adds").
    // In memory and on disk: the disk store once read the variant index (status 0) as a corrupt
    // file, so no response with `Vary` was ever served from it.
    @Test(arguments: [TransportKind.asyncHTTPClient], [false, true])
    func varySelectsTheVariantByTheRequestsFieldValues(_ kind: TransportKind, onDisk: Bool) async throws {
        let store: any CacheStore = onDisk ? DiskCacheStore(directory: temporaryDirectory("vary")) : MemoryCacheStore()
        try await withCachingClient(kind, store: store) { client, server, _, _ in
            let english = Self.article("/vary", headers: [.acceptLanguage: "en"])
            let french = Self.article("/vary", headers: [.acceptLanguage: "fr"])
            let en1 = try await client.response(english)
            let fr1 = try await client.response(french)
            #expect(en1.value.title.hasSuffix("en"))
            #expect(fr1.source == .network)
            #expect(fr1.value.title.hasSuffix("fr"))
            let fr2 = try await client.response(french)
            #expect(fr2.source == .cache)
            #expect(fr2.value == fr1.value)
            // Each variant is kept: English is still there after French was stored.
            let en2 = try await client.response(english)
            #expect(en2.source == .cache)
            #expect(en2.value == en1.value)
            // A request without the field is a third variant.
            let none1 = try await client.response(Self.article("/vary"))
            #expect(none1.source == .network)
            #expect(none1.value.title.hasSuffix("none"))
            #expect(server.requests.count == 3)
            // Vary: * is never reused, whatever the policy.
            _ = try await client.send(Self.article("/vary-star", policy: .cacheElseNetwork))
            let star = try await client.response(Self.article("/vary-star", policy: .cacheElseNetwork))
            #expect(star.source == .network)
            #expect(server.requests.count == 5)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func eachVariantIsRevalidatedOnItsOwn(_ kind: TransportKind) async throws {
        try await withCachingClient(kind) { client, server, clock, _ in
            let english = Self.article("/vary-etag", headers: [.acceptLanguage: "en"])
            let french = Self.article("/vary-etag", headers: [.acceptLanguage: "fr"])
            let en1 = try await client.response(english)
            let fr1 = try await client.response(french)
            clock.advance(11)
            let en2 = try await client.response(english)
            #expect(en2.source == .revalidated)
            #expect(en2.value == en1.value)
            #expect(server.requests.last?.header("If-None-Match") == "\"en\"")
            clock.advance(5)
            let en3 = try await client.response(english)
            #expect(en3.source == .cache)  // refreshed by the 304 (max-age=30)
            let fr2 = try await client.response(french)
            #expect(fr2.source == .revalidated)  // still stale: only English was refreshed
            #expect(fr2.value == fr1.value)
            #expect(server.requests.last?.header("If-None-Match") == "\"fr\"")
            #expect(server.requests.count == 4)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func cacheElseNetworkServesAnEntryHoweverOld(_ kind: TransportKind) async throws {
        try await withCachingClient(kind, policy: .cacheElseNetwork) { client, server, clock, _ in
            let first = try await client.response(Self.article("/plain"))
            clock.advance(86400 * 365)
            let second = try await client.response(Self.article("/plain"))
            #expect(first.source == .network)
            #expect(second.source == .cache)
            #expect(second.value == first.value)
            #expect(second.age == .seconds(86400 * 365))
            #expect(server.requests.count == 1)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func cacheForADurationServesInsideItAndRefetchesAndReplacesAfter(_ kind: TransportKind) async throws {
        try await withCachingClient(kind, policy: .cacheFor(.seconds(30))) { client, server, clock, _ in
            let first = try await client.send(Self.article("/plain"))
            clock.advance(29)
            let inside = try await client.response(Self.article("/plain"))
            #expect(inside.source == .cache)
            #expect(inside.value == first)
            clock.advance(2)
            let after = try await client.response(Self.article("/plain"))
            #expect(after.source == .network)
            #expect(after.value.id != first.id)
            let replaced = try await client.response(Self.article("/plain"))
            #expect(replaced.source == .cache)
            #expect(replaced.value == after.value)
            #expect(server.requests.count == 2)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func networkOnlyNeitherReadsNorWrites(_ kind: TransportKind) async throws {
        let store = MemoryCacheStore()
        try await withCachingClient(kind, store: store, policy: .networkOnly) { client, server, _, _ in
            _ = try await client.send(Self.article("/max-age"))
            let second = try await client.response(Self.article("/max-age"))
            #expect(second.source == .network)
            #expect(server.requests.count == 2)
            #expect(store.count == 0)
            // The same store, read under the HTTP policy, has nothing either.
            let third = try await client.response(Self.article("/max-age", policy: .http))
            #expect(third.source == .network)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func cacheThenNetworkYieldsTheStoredValueThenTheFreshOne(_ kind: TransportKind) async throws {
        try await withCachingClient(kind, policy: .cacheElseNetwork) { client, server, clock, _ in
            var values: [Response<Article>] = []
            for try await response in client.updates(Self.article("/plain")) { values.append(response) }
            #expect(values.map(\.source) == [.network])

            clock.advance(42)
            values = []
            for try await response in client.updates(Self.article("/plain")) { values.append(response) }
            #expect(values.map(\.source) == [.cache, .network])
            #expect(values.first?.age == .seconds(42))
            #expect(values[0].value.id != values[1].value.id)
            #expect(server.requests.count == 2)
            // The fresh value replaced the stored one.
            let stored = try await client.response(Self.article("/plain"))
            #expect(stored.source == .cache)
            #expect(stored.value == values[1].value)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func cacheThenNetworkEndsWithTheErrorAfterTheCachedValue(_ kind: TransportKind) async throws {
        try await withCachingClient(kind, policy: .cacheElseNetwork) { client, server, _, _ in
            _ = try await client.send(Self.article("/once"))
            var sources: [ResponseSource] = []
            let error = await expectCourierError {
                for try await response in client.updates(Self.article("/once").retry(.never)) { sources.append(response.source) }
            }
            #expect(sources == [.cache])
            #expect(error?.kind == .httpStatus)
            #expect(server.requests.count == 2)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func postIsCachedOnlyWhenOptedInAndKeyedByItsBody(_ kind: TransportKind) async throws {
        let policy = CachePolicy.cacheFor(.seconds(60)).allowingAnyMethod()
        try await withCachingClient(kind) { client, server, _, _ in
            func search(_ query: String, policy: CachePolicy?) -> Endpoint<Article> {
                var endpoint = Endpoint<Article>(method: .post, path: "/search", body: .json(["q": query]))
                endpoint.cachePolicy = policy
                return endpoint
            }
            let plain1 = try await client.response(search("a", policy: nil))
            let plain2 = try await client.response(search("a", policy: nil))
            #expect(plain1.source == .network)
            #expect(plain2.source == .network)
            let a1 = try await client.response(search("a", policy: policy))
            let a2 = try await client.response(search("a", policy: policy))
            let b1 = try await client.response(search("b", policy: policy))
            #expect(a1.source == .network)
            #expect(a2.source == .cache)
            #expect(a2.value == a1.value)
            #expect(b1.source == .network)
            #expect(server.requests.count == 4)
        }
    }

    /// RFC 9110 §13.1.2: on a method other than GET or HEAD, `If-None-Match` makes the server act
    /// only when no representation matches (and answer 412 when one does). A POST kept under
    /// `allowingAnyMethod()` whose lifetime is over is sent again without conditions, even with
    /// an ETag stored (the test origin would answer such a condition with 304).
    @Test(arguments: TransportKind.allCases)
    func aStoredPOSTIsSentAgainWithoutConditionsNeverRevalidated(_ kind: TransportKind) async throws {
        try await withCachingClient(kind) { client, server, clock, _ in
            var endpoint = Endpoint<Article>(method: .post, path: "/etag", body: .json(["q": "a"]))
            endpoint.cachePolicy = CachePolicy.cacheFor(.seconds(60)).allowingAnyMethod()
            let first = try await client.response(endpoint)
            let second = try await client.response(endpoint)
            #expect(first.source == .network)
            #expect(second.source == .cache)
            clock.advance(120)
            let third = try await client.response(endpoint)
            #expect(third.source == .network)
            #expect(third.value.id != first.value.id)
            #expect(server.requests.count == 2)
            #expect(server.requests.allSatisfy { $0.header("If-None-Match") == nil })
        }
    }

    @Test(arguments: TransportKind.allCases)
    func anUnsafeMethodInvalidatesTheURLsEntries(_ kind: TransportKind) async throws {
        try await withCachingClient(kind) { client, server, _, _ in
            let first = try await client.send(Self.article("/items"))
            let cached = try await client.response(Self.article("/items"))
            #expect(cached.source == .cache)
            _ = try await client.send(Endpoint<Article>(method: .post, path: "/items", body: .json(["title": "new"])))
            let after = try await client.response(Self.article("/items"))
            #expect(after.source == .network)
            #expect(after.value.id != first.id)
            #expect(server.requests.count == 3)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func partitionsKeepAccountsApartAndClearingOneRemovesItsEntries(_ kind: TransportKind) async throws {
        let account = Locked("alice")
        let store = MemoryCacheStore()
        let headers: HTTPFields = [.authorization: "Bearer token"]
        try await withCachingClient(kind, store: store, partition: account) { client, server, _, _ in
            let alice = try await client.response(Self.article("/max-age", headers: headers))
            account.withLock { $0 = "bob" }
            let bob = try await client.response(Self.article("/max-age", headers: headers))
            #expect(bob.source == .network)
            #expect(bob.value != alice.value)
            #expect(store.count == 2)

            client.clearCache(partition: "alice")
            #expect(store.count == 1)
            let bobAgain = try await client.response(Self.article("/max-age", headers: headers))
            #expect(bobAgain.source == .cache)
            account.withLock { $0 = "alice" }
            let aliceAgain = try await client.response(Self.article("/max-age", headers: headers))
            #expect(aliceAgain.source == .network)
            #expect(server.requests.count == 3)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func logLinesAndResponsesSayWhereTheValueCameFrom(_ kind: TransportKind) async throws {
        let logs = InMemoryLogHandler()
        var logger = Logger(label: "cache") { _ in logs }
        logger.logLevel = .info
        try await withCachingClient(kind, logger: logger) { client, _, clock, _ in
            _ = try await client.send(Self.article("/etag"))
            clock.advance(3)
            _ = try await client.send(Self.article("/etag"))
            clock.advance(30)
            _ = try await client.send(Self.article("/etag"))
            _ = try await client.send(Self.article("/swr"))
            clock.advance(70)
            _ = try await client.send(Self.article("/swr"))
            let lines = logs.entries.map { "\($0.message)" }.filter { $0.hasPrefix("← ") }
            #expect(lines.count == 5)
            #expect(lines[0].hasSuffix(" success"))
            #expect(lines[1].hasSuffix("success(cache, age 3s)"))
            #expect(lines[2].hasSuffix("success(revalidated)"))
            #expect(lines[4].hasSuffix("success(stale, age 70s)"))
        }
    }
}
