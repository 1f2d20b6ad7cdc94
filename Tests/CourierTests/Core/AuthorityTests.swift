import CourierAsyncHTTPClient
import Foundation
import HTTPTypes
import Testing

@testable import Courier

/// Scheme, host and port, worked out in one place (`Authority`), and the places that ask it.
@Suite("Authority: one origin rule for redirects, OAuth2, the cache, the scheduler and the transports")
struct AuthorityTests {
    /// RFC 3986 §3.1: a scheme is compared without case. What the build and the service defaults
    /// take for an absolute http(s) URL (anything else is a path below the base).
    @Test
    func absoluteHTTPURLsAreToldByTheirSchemeWithoutCase() {
        for absolute in ["http://a", "https://a", "HTTP://a", "HttpS://a/b?c", "https://", "hTTPs:///"] {
            #expect(RequestBuilder.isAbsoluteHTTP(absolute), "\(absolute)")
        }
        for relative in ["", "/", "h", "http", "http:", "https:/a", "http:a", "httpx://a", "ftp://a", "/http://a", "https//a"] {
            #expect(!RequestBuilder.isAbsoluteHTTP(relative), "\(relative)")
        }
    }

    /// RFC 3986 §6.2.2.1 (scheme and host are case-insensitive) and §6.2.3 (the default port may
    /// be left out); RFC 6454 §4: the origin is scheme, host and port.
    @Test
    func theSameOriginWhateverTheCaseAndWhetherTheDefaultPortIsWritten() {
        #expect(Authority(URL(string: "HTTPS://Example.COM/a")!) == Authority(URL(string: "https://example.com:443/b")!))
        #expect(Authority(scheme: "http", authority: "example.com:80") == Authority(URL(string: "http://EXAMPLE.com")!))
        #expect(Authority(scheme: "https", authority: "example.com") != Authority(scheme: "http", authority: "example.com"))
        #expect(Authority(scheme: "https", authority: "example.com:8443") != Authority(scheme: "https", authority: "example.com"))
        #expect(Authority(scheme: "https", authority: "a.example.com") != Authority(scheme: "https", authority: "example.com"))
    }

    @Test
    func ipv6LiteralsAndHostilePorts() {
        let literal = Authority(scheme: "https", authority: "[::1]:8443")
        #expect(literal?.host == "::1")
        #expect(literal?.port == 8443)
        #expect(Authority(scheme: "https", authority: "[::1]")?.port == 443)
        #expect(Authority(URL(string: "https://[::1]:8443/x")!) == literal)
        // An empty port is no port (RFC 3986 §3.2.3); anything else that is not 0...65535 is refused.
        #expect(Authority(scheme: "http", authority: "example.com:")?.port == 80)
        #expect(Authority(scheme: "https", authority: "example.com:65536") == nil)
        #expect(Authority(scheme: "https", authority: "example.com:99999999999999999999999") == nil)
        #expect(Authority(scheme: "https", authority: "example.com:-1") == nil)
        // Leading zeros are digits too (RFC 3986 §3.2.3: `port = *DIGIT`).
        #expect(Authority(scheme: "https", authority: "pinned.example:000443")?.port == 443)
        #expect(Authority(scheme: "https", authority: "pinned.example:0000000000000000443")?.port == 443)
        // RFC 9110 §4.2.4: no user information in an HTTP request's target.
        #expect(Authority(scheme: "https", authority: "user@pinned.example") == nil)
        #expect(Authority(scheme: "https", authority: "example.com:443:1") == nil)
        #expect(Authority(scheme: "https", authority: "[::1") == nil)
        #expect(Authority(scheme: "https", authority: "") == nil)
        #expect(Authority(scheme: nil, authority: "example.com") == nil)
        #expect(Authority(scheme: "ftp", authority: "example.com")?.port == nil)
    }

    /// The redirect stage: a hop to `https://host:443/` stays at the origin of `https://host/`.
    @Test
    func redirectsTreatAWrittenDefaultPortAsTheSameOrigin() {
        #expect(RedirectStage.sameOrigin(URL(string: "https://example.com/a")!, URL(string: "https://EXAMPLE.com:443/b")!))
        #expect(!RedirectStage.sameOrigin(URL(string: "https://example.com/a")!, URL(string: "http://example.com/b")!))
        #expect(!RedirectStage.sameOrigin(URL(string: "https://example.com/a")!, URL(string: "file:///etc/passwd")!))
    }

    /// The OAuth2 authenticator refreshes its token for a `401` only when the response came from
    /// the request's origin (RFC 6454 §4: scheme, host and port): a written default port, the
    /// letter case of scheme and host and an IPv6 literal's brackets do not make another origin;
    /// another scheme, host or port does. A response without a URL was not redirected.
    @Test
    func theOAuth2AuthenticatorTakesTheSameOriginWhateverItsSpelling() {
        func check(_ requestURL: String, _ responseURL: String?) -> Bool {
            let url = URL(string: requestURL)!
            let request = Request(
                head: HTTPRequest(
                    method: .get, scheme: url.scheme,
                    authority: url.host.map { host in
                        let bracketed = host.contains(":") ? "[\(host)]" : host
                        return url.port.map { "\(bracketed):\($0)" } ?? bracketed
                    }, path: url.path))
            let response = RawResponse(head: HTTPResponse(status: .unauthorized), url: responseURL.map { URL(string: $0)! })
            return OAuth2Authenticator.isFromOrigin(of: request, response)
        }
        #expect(check("https://api.example.com/x", "https://API.Example.com:443/x"))
        #expect(check("https://api.example.com:443/x", "https://api.example.com/y"))
        #expect(check("http://[::1]:8080/x", "http://[::1]:8080/y"))
        #expect(check("https://[::1]/x", "https://[::1]:443/y"))
        #expect(check("https://api.example.com/x", nil))
        #expect(!check("https://api.example.com/x", "http://api.example.com/x"))
        #expect(!check("https://api.example.com/x", "https://api.example.com:8443/x"))
        #expect(!check("https://api.example.com/x", "https://other.example.com/x"))
        #expect(!check("http://[::1]:8080/x", "http://127.0.0.1:8080/x"))
    }

    /// RFC 9111 §4.4: a `Content-Location` or `Location` of the same origin names a URL the
    /// cache may act on. The cache compared ports as written, so `https://host:443/x` was
    /// another origin than `https://host/`; it is the same.
    @Test
    func theCacheTakesAWrittenDefaultPortForTheSameOrigin() {
        #expect(ResponseCache.sameOrigin("https://example.com:443/x", as: "https://example.com/y") == "https://example.com/x")
        #expect(ResponseCache.sameOrigin("/x", as: "https://EXAMPLE.com:443/y") == "https://example.com/x")
        #expect(LogicalKey.normalise(scheme: "HTTPS", authority: "Example.com:443", path: "/x?") == "https://example.com/x")
        #expect(ResponseCache.sameOrigin("/x", as: "https://example.com/y") != nil)
        #expect(ResponseCache.sameOrigin("https://example.com:8443/x", as: "https://example.com/y") == nil)
        #expect(ResponseCache.sameOrigin("http://example.com/x", as: "https://example.com/y") == nil)
    }
}

/// A pinned transport never sends a request whose target it cannot read: it could be a pinned
/// host in disguise.
@Suite("Pins and targets that cannot be read")
struct UnreadableTargetPinTests {
    @Test(arguments: ["user@localhost", "localhost:99999", "[::1"])
    func aPinnedTransportRefusesATargetItCannotRead(_ authority: String) async throws {
        let transport = try AsyncHTTPClientTransport(
            validating: .init { $0.pinning.pin("localhost", to: [try .publicKey("sha256/" + Data(count: 32).base64EncodedString())]) })
        let head = HTTPRequest(method: .get, scheme: "https", authority: authority, path: "/")
        let error = await expectCourierError { _ = try await transport.send(Request(head: head, timeout: .seconds(5))) }
        #expect(error?.kind == .invalidRequest)
        try await transport.shutdown()
    }
}
