import Courier
import Foundation
import HTTPTypes
import Testing

/// `Request.urlString` copies scheme, "://", authority and path into one string by bytes; it
/// must be exactly what joining the three as text gives, whatever they hold.
@Suite("Request URL strings")
struct RequestURLStringTests {
    @Test(arguments: [
        ("https", "example.com", "/"),
        ("http", "127.0.0.1:8080", "/items?q=a%20b&x=%E2%9C%93"),
        ("https", "[::1]:443", "/a/b/c/"),
        ("https", "bücher.example", "/späti/ü?ß=1"),
        ("https", "", "*"),
        ("https", "example.com", ""),
        ("wss", String(repeating: "a", count: 300) + ".example", "/" + String(repeating: "p/", count: 5_000)),
    ])
    func theURLStringJoinsSchemeAuthorityAndPath(_ scheme: String, _ authority: String, _ path: String) {
        let request = Request(head: HTTPRequest(method: .get, scheme: scheme, authority: authority, path: path))
        #expect(request.urlString == scheme + "://" + authority + path)
        #expect(request.urlString.utf8.count == scheme.utf8.count + 3 + authority.utf8.count + path.utf8.count)
    }

    @Test
    func aMissingSchemeIsHTTPSAndAMissingPathIsTheRoot() {
        var head = HTTPRequest(method: .get, scheme: nil, authority: "example.com", path: nil)
        #expect(Request(head: head).urlString == "https://example.com/")
        head.authority = nil
        #expect(Request(head: head).urlString == "https:///")
    }
}
