import Courier
import CourierAsyncHTTPClient
import Foundation
import Testing

struct HTTPBinAnything: Decodable, Sendable {
    var url: String
}

/// Interop with httpbin (PyPI) under gunicorn, an HTTP server none of us wrote, on a loopback port.
/// `.ci/run` installs it; under CI (COURIER_CI=1) these tests always run, and fail if it is missing.
@Suite(
    "Interop: httpbin caching, auth challenge and cookie endpoints", .serialized,
    .enabled(if: ExternalServer.enabled(module: "httpbin") && ExternalServer.enabled(module: "gunicorn")))
struct HTTPBinInteropTests {
    func withHTTPBin(_ kind: TransportKind, _ body: (Client, TestClock, MemoryCacheStore) async throws -> Void) async throws {
        let start = {
            try await ExternalServer.start(
                executable: "/usr/bin/env",
                arguments: ["python3", "-m", "gunicorn", "--bind", "127.0.0.1:{port}", "--workers", "2", "httpbin:app"]
            )
        }
        try await withInteropServer(kind, start: start) { server, transport in
            // httpbin stamps real Date fields, so the hand-moved clock starts at the real time.
            let clock = TestClock(start: Date())
            let store = MemoryCacheStore()
            let client = Client(
                configuration: .init(transport: transport, baseURL: server.baseURL) {
                    $0.cache = CacheConfiguration(store: store, now: { clock.now })
                })
            try await body(client, clock, store)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aBasicAuthChallengeWithoutCredentialsIsA401OnBothTransports(_ kind: TransportKind) async throws {
        // httpbin's /basic-auth answers 401 with WWW-Authenticate: Basic; URLSession once waited
        // forever for a credential nobody gave.
        try await withHTTPBin(kind) { client, _, _ in
            let transport = client.configuration.transport
            let courier = Client(configuration: .init(transport: transport, baseURL: client.configuration.baseURL))
            let anonymous = Endpoint<String>(path: "/basic-auth/u/p", acceptedStatuses: 200..<500, timeout: .seconds(60), decoding: .string)
            let denied = try await courier.response(anonymous)
            #expect(denied.status.code == 401)
            #expect(denied.headers[.wwwAuthenticate]?.hasPrefix("Basic") == true)
            let signedIn = Endpoint<String>(
                path: "/basic-auth/u/p", headers: [.authorization: "Basic " + Data("u:p".utf8).base64EncodedString()],
                timeout: .seconds(60), decoding: .string
            )
            let allowed = try await courier.response(signedIn)
            #expect(allowed.status.code == 200)
            #expect(allowed.value.contains("\"authenticated\": true"))
        }
    }

    struct HTTPBinCookies: Decodable, Sendable {
        var cookies: [String: String]
    }

    @Test(arguments: TransportKind.allCases)
    func httpbinsCookiesAreSetSentAndDeletedThroughTheJar(_ kind: TransportKind) async throws {
        // /cookies/set answers 302 → /cookies with Set-Cookie; /cookies echoes what it received;
        // /cookies/delete expires them (RFC 6265 §5.3).
        try await withHTTPBin(kind) { client, _, _ in
            let transport = client.configuration.transport
            let jar = CookieJar()
            let courier = Client(configuration: .init(transport: transport, baseURL: client.configuration.baseURL) { $0.cookies = jar })
            let set = try await courier.send(Endpoint<HTTPBinCookies>(path: "/cookies/set", query: ["flavour": "oat", "size": "large"]))
            #expect(set.cookies == ["flavour": "oat", "size": "large"])
            #expect(Set(jar.allCookies.map(\.name)) == ["flavour", "size"])
            let deleted = try await courier.send(Endpoint<HTTPBinCookies>(path: "/cookies/delete", query: ["flavour": ""]))
            #expect(deleted.cookies == ["size": "large"])
            jar.removeAll()
            let none = try await courier.send(Endpoint<HTTPBinCookies>(path: "/cookies"))
            #expect(none.cookies.isEmpty)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func maxAgeIsServedFromCacheUntilItExpires(_ kind: TransportKind) async throws {
        try await withHTTPBin(kind) { client, clock, _ in
            let endpoint = Endpoint<HTTPBinAnything>(path: "/cache/60")
            let first = try await client.response(endpoint)
            #expect(first.source == .network)
            #expect(first.headers[.cacheControl] == "public, max-age=60")
            clock.advance(30)
            let second = try await client.response(endpoint)
            #expect(second.source == .cache)
            #expect(second.age.map { $0 >= .seconds(30) && $0 < .seconds(35) } == true)
            clock.advance(31)
            // /cache/{n} sends no validator: once stale, a full request.
            let third = try await client.response(endpoint)
            #expect(third.source == .network)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func etagIsRevalidatedWithIfNoneMatchAndA304(_ kind: TransportKind) async throws {
        try await withHTTPBin(kind) { client, _, _ in
            // httpbin sends this ETag unquoted, and expects it back as sent.
            let endpoint = Endpoint<HTTPBinAnything>(path: "/etag/courier-v1")
            let first = try await client.response(endpoint)
            #expect(first.source == .network)
            #expect(first.headers[.eTag] == "courier-v1")
            let second = try await client.response(endpoint)
            #expect(second.source == .revalidated)
            #expect(second.status.code == 200)
            #expect(second.value.url == first.value.url)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func cacheEndpointIsRevalidatedWithItsValidators(_ kind: TransportKind) async throws {
        try await withHTTPBin(kind) { client, clock, _ in
            // /cache answers with Last-Modified and ETag and no freshness; conditional requests get 304.
            let endpoint = Endpoint<HTTPBinAnything>(path: "/cache")
            let first = try await client.response(endpoint)
            #expect(first.source == .network)
            #expect(first.headers[.lastModified] != nil)
            // httpbin stamps Last-Modified before gunicorn stamps Date: when a second turns in
            // between, the response is heuristically fresh for a tenth of the gap (RFC 9111
            // §4.2.2) and the next request is answered from the cache. A minute on, it is stale.
            clock.advance(60)
            let second = try await client.response(endpoint)
            #expect(second.source == .revalidated)
            #expect(second.value.url == first.value.url)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func responseHeadersDriveFreshnessAndNoStore(_ kind: TransportKind) async throws {
        try await withHTTPBin(kind) { client, clock, store in
            let fresh = Endpoint<Data>(path: "/response-headers", query: ["Cache-Control": "max-age=5"], decoding: .data)
            _ = try await client.send(fresh)
            clock.advance(4)
            let inside = try await client.response(fresh)
            #expect(inside.source == .cache)
            clock.advance(2)
            let after = try await client.response(fresh)
            #expect(after.source == .network)

            let count = store.count
            let noStore = Endpoint<Data>(path: "/response-headers", query: ["Cache-Control": "no-store, max-age=60"], decoding: .data)
            _ = try await client.send(noStore)
            let again = try await client.response(noStore)
            #expect(again.source == .network)
            #expect(store.count == count)
        }
    }
}
