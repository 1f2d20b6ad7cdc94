import Courier
import CourierTestServer
import Foundation
import Testing

/// `"\(pathSegment: value)"`: a value interpolated into a path is one segment (RFC 3986 §3.3: a
/// segment cannot hold `/`; `?` starts the query, `#` the fragment, §3.4–3.5); `.` and `..`,
/// dot-segments that §5.2.4 removes even percent-encoded (§6.2.2.2), are refused.
@Suite("Path segments: an interpolated value cannot change the target")
struct PathSegmentTests {
    @Test(arguments: [
        ("plain-Value_1.~", "plain-Value_1.~"),
        ("a/b", "a%2Fb"),
        ("../admin", "..%2Fadmin"),
        ("..", "%2E%2E"),
        (".", "%2E"),
        ("...", "..."),
        ("q?x=1#frag", "q%3Fx%3D1%23frag"),
        ("50% off; +1 a b", "50%25%20off%3B%20%2B1%20a%20b"),
        ("%2F", "%252F"),
        ("é\u{0}\r\n", "%C3%A9%00%0D%0A"),
        ("", ""),
    ])
    func aValueIsPercentEncodedAsOneSegment(_ value: String, _ expected: String) {
        #expect("/users/\(pathSegment: value)/posts" == "/users/\(expected)/posts")
    }

    /// A value that is not a string is encoded by its description.
    struct Slug: CustomStringConvertible {
        var description: String { "a/b?c" }
    }

    @Test
    func anyDescriptionIsEncoded() {
        #expect("/n/\(pathSegment: 42)/\(pathSegment: -1.5)" == "/n/42/-1.5")
        #expect("/n/\(pathSegment: Slug())" == "/n/a%2Fb%3Fc")
    }

    /// The server receives the encoded segment as the target, on both transports, and the request
    /// reaches the route it names: not another resource, the query or a fragment.
    @Test(arguments: TransportKind.allCases)
    func theServerReceivesOneSegment(_ kind: TransportKind) async throws {
        let server = try await http1Server { request in
            .text("\(request.method) \(request.uri)")
        }
        try await withClient(kind, server: server) { client in
            for value in ["a/b", "x?admin=1", "x#y", "a b%2F", "..."] {
                let answer = try await client.send(Endpoint<String>(path: "/users/\(pathSegment: value)/posts", decoding: .string))
                let expected = "/users/\(PathSegmentTests.encoded(value))/posts"
                #expect(answer == "GET \(expected)", "value \(value.debugDescription)")
            }
        }
    }

    private static func encoded(_ value: String) -> String {
        switch value {
        case "a/b": return "a%2Fb"
        case "...": return "..."
        case "x?admin=1": return "x%3Fadmin%3D1"
        case "x#y": return "x%23y"
        default: return "a%20b%252F"
        }
    }

    /// A value that is `.` or `..` fails when the request is built, with kind `invalidRequest`,
    /// and nothing is sent: servers resolve `%2E%2E` as `..` (RFC 3986 §6.2.2.2), so no encoding
    /// keeps it in place. A path written with an encoded dot-segment by hand is refused alike.
    @Test(arguments: TransportKind.allCases)
    func aDotSegmentIsRefusedBeforeAnythingIsSent(_ kind: TransportKind) async throws {
        let server = try await http1Server { request in .text(request.uri) }
        try await withClient(kind, server: server) { client in
            for path in [
                "/users/\(pathSegment: "..")/posts", "/users/\(pathSegment: ".")", "/a/%2e%2E/b", "/a/.%2E", "/a/%2E./b?q=1",
                "/a/%2E%2E;x/b",
                // A `..` between encoded slashes or backslashes: servers that decode `%2F`, or take
                // `\` for `/`, before resolving dot-segments climb out with it.
                "/users/\(pathSegment: "../admin")/profile", "/users/..%2Fadmin", "/users/%2E%2E%2Fadmin", "/users/..%5cadmin",
                "/users/..\\admin", "/users/x%2F..%2F..",
            ] {
                let error = await expectCourierError { _ = try await client.send(Endpoint<String>(path: path, decoding: .string)) }
                #expect(error?.kind == .invalidRequest, "\(path)")
            }
            // A `..` written as it is (a value interpolated without `pathSegment:`) would leave the
            // base's path (RFC 3986 §5.2.4: `/v1` + `../admin` is `/admin`); and an absolute URL
            // made with `pathSegment:` is refused as a relative path is.
            let absolute = "\(server.baseURL.absoluteString)/u/\(pathSegment: "..")/secret"
            // A `..;` too: servers that drop a segment's `;` parameters (RFC 3986 §3.3) before
            // resolving dot-segments climb out of the base with it (`/v1/users/..;/profile`).
            for path in ["../admin", "/a/../b", "/a/..", "/a/..?q=1", absolute, "/users/..;/profile", "/a/..;x=1/b", "..;/admin"] {
                let error = await expectCourierError { _ = try await client.send(Endpoint<String>(path: path, decoding: .string)) }
                #expect(error?.kind == .invalidRequest, "\(path)")
            }
            // Encoded dots inside a longer segment, or only in the query, are no dot-segment; nor
            // are dots that are part of a name, or a `..` only in the query.
            let allowed = [
                "/a/%2E%2E%2E", "/a/x%2E", "/a?p=%2E%2E", "/a/.../b", "/a/..b/c..", "/a?p=../x", "/a/x;..", "/a/..b;c",
                "/a/\(pathSegment: "a/b")", "/a/..x%2Fy..", "/a/%2F%2F", "/a?p=..%2F..", "/a/\(pathSegment: "./config.json")",
                "/a/\(pathSegment: #"v1\."#)", "/a/caf%C3%A9%20au%20lait",
            ]
            for path in allowed {
                _ = try await client.send(Endpoint<String>(path: path, decoding: .string))
            }
            #expect(server.requests.map(\.uri) == allowed)
        }
    }

    /// RFC 9112 §3.2 and RFC 3986 §2.1, §3.3: a request target is ASCII, and a byte no path or
    /// query may hold goes percent-encoded. A path written with such bytes (`/u/café`, a space)
    /// went out raw over AsyncHTTPClient and encoded over URLSession; and the same text in two
    /// Unicode forms (NFC `é`, NFD `e` + U+0301), different bytes to the server, was one request
    /// to deduplication and one entry to the cache. Bytes already percent-encoded stay as written.
    @Test(arguments: TransportKind.allCases)
    func aPathWithBytesNoTargetMayHoldIsPercentEncodedAlike(_ kind: TransportKind) async throws {
        let server = try await http1Server { request in .text(request.uri) }
        let written = [
            ("/u/caf\u{E9}", "/u/caf%C3%A9"), ("/u/cafe\u{301}", "/u/cafe%CC%81"), ("/a b/c%20d", "/a%20b/c%20d"),
            ("/q?x=a b&y=\u{E9}|\"<>", "/q?x=a%20b&y=%C3%A9%7C%22%3C%3E"), ("/k/a:b@c!$&'()*+,;=", "/k/a:b@c!$&'()*+,;="),
            ("/d?off=100%&x=%2f%zz", "/d?off=100%25&x=%2f%25zz"),
        ]
        let paths = written + [(server.baseURL.absoluteString + "/abs/\u{E9} x%20y?q=a b", "/abs/%C3%A9%20x%20y?q=a%20b")]
        try await withClient(kind, server: server) { client in
            for (path, _) in paths {
                _ = try await client.send(Endpoint<String>(path: path, decoding: .string))
            }
            #expect(server.requests.map(\.uri) == paths.map(\.1))
        }
        let cached = try await http1Server { request in .text(request.uri, headers: [("Cache-Control", "max-age=60")]) }
        try await withClient(kind, server: cached, configure: { $0.cache = CacheConfiguration(store: MemoryCacheStore()) }) { client in
            let composed = try await client.send(Endpoint<String>(path: "/u/caf\u{E9}", decoding: .string))
            let decomposed = try await client.send(Endpoint<String>(path: "/u/cafe\u{301}", decoding: .string))
            #expect(composed == "/u/caf%C3%A9")
            #expect(decomposed == "/u/cafe%CC%81")
            #expect(cached.requests.count == 2)
        }
    }
}
