import Courier
import CourierTestServer
import Foundation
import Testing

/// `"\(segment: value)"`: a value interpolated into a path is one segment, whatever it holds
/// (RFC 3986 §3.3: a segment cannot hold `/`; `?` starts the query, `#` the fragment, §3.4–3.5;
/// `.` and `..` are dot-segments that §5.2.4 removes).
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
        #expect("/users/\(segment: value)/posts" == "/users/\(expected)/posts")
    }

    @Test
    func anyDescriptionIsEncoded() {
        #expect("/n/\(segment: 42)/\(segment: -1.5)" == "/n/42/-1.5")
    }

    /// The server receives the encoded segment as the target, on both transports, and the request
    /// reaches the route it names: not another resource, the query or a fragment.
    @Test(arguments: TransportKind.allCases)
    func theServerReceivesOneSegment(_ kind: TransportKind) async throws {
        let server = try await http1Server { request in
            .text("\(request.method) \(request.uri)")
        }
        try await withClient(kind, server: server) { client in
            for value in ["a/b", "..", "x?admin=1", "x#y", "a b%2F"] {
                let answer = try await client.send(Endpoint<String>(path: "/users/\(segment: value)/posts", decoding: .string))
                let expected = "/users/\(PathSegmentTests.encoded(value))/posts"
                #expect(answer == "GET \(expected)", "value \(value.debugDescription)")
            }
        }
    }

    private static func encoded(_ value: String) -> String {
        switch value {
        case "a/b": return "a%2Fb"
        case "..": return "%2E%2E"
        case "x?admin=1": return "x%3Fadmin%3D1"
        case "x#y": return "x%23y"
        default: return "a%20b%252F"
        }
    }
}
