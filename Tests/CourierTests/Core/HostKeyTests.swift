import Foundation
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
}
