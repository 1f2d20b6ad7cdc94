import Foundation
import HTTPTypes
import Testing

@testable import Courier

@Suite("The host a per-host limit counts")
struct HostKeyTests {
    @Test(arguments: [
        ("https", "EXAMPLE.com:443", "example.com"), ("http", "Example.COM:80", "example.com"),
        ("http", "example.com:8080", "example.com:8080"),
        ("https", "example.com:80", "example.com:80"), ("https", "[::1]:443", "[::1]"), ("http", "a", "a"), ("http", ":80", ":80"),
    ])
    func theHostIsLowerCasedAndTheDefaultPortDropped(_ scheme: String, _ authority: String, _ key: String) {
        // RFC 3986 §6.2.2.1 (case) and §6.2.3 (a default port is the same as none).
        #expect(Authority.hostKey(scheme: scheme, authority: authority) == key)
    }

    /// `http://example.com` and `https://example.com` are two origins (RFC 6454 §4: the scheme is
    /// part of it) on two ports: the scheduler counted them as one host, so their per-host limit
    /// was shared, and the HTTPS origin answering over HTTP/2 lifted the cleartext one's limit to
    /// the HTTP/2 one (many HTTP/1.1 connections at once to a host that speaks HTTP/1.1 only).
    @Test
    func aCleartextOriginIsNotItsHTTPSNamesakeToTheScheduler() throws {
        func key(_ url: String) throws -> String {
            let parts = try #require(URLComponents(string: url))
            let authority = try #require(parts.percentEncodedHost).appending(parts.port.map { ":\($0)" } ?? "")
            return LogicalKey.hostKey(of: HTTPRequest(method: .get, scheme: parts.scheme, authority: authority, path: "/"))
        }
        let secure = try key("https://Example.com/a")
        let clear = try key("http://example.com/a")
        #expect(secure == "example.com")
        #expect(clear != secure)
        #expect(try key("http://example.com:80/b") == clear)
        #expect(try key("http://[::1]/") != (try key("https://[::1]/")))
        #expect(try key("http://[::1]:8080/") == "[::1]:8080")
        #expect(try key("http://127.0.0.1:8080/") == "127.0.0.1:8080")
        // What a redirect's response is checked against is the same key.
        #expect(ScheduleStage.answeredBy(clear, URL(string: "http://EXAMPLE.com/x")))
        #expect(!ScheduleStage.answeredBy(clear, URL(string: "https://example.com/x")))
        // The HTTPS origin speaking HTTP/2 leaves the cleartext one at the HTTP/1.1 limit.
        var state = SchedulerState(configuration: .init(maxConcurrentRequests: 100, maxRequestsPerHost: 2, maxRequestsPerHTTP2Host: 50))
        state.markHTTP2(secure)
        #expect(state.limit(for: secure) == 50)
        #expect(state.limit(for: clear) == 2)
    }
}
