import Foundation
import Testing

@testable import Courier

/// The byte-level percent-encoders of the build stage give exactly what Foundation's
/// `addingPercentEncoding` gave before them (RFC 3986 §2.1 and §2.3 for query items; the
/// WHATWG form encoding for form bodies), for fixed cases and for many random strings.
@Suite("Percent-encoding of query items and form fields")
struct PercentEncodingTests {
    static let unreserved: CharacterSet = {
        var set = CharacterSet()
        set.insert(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
        return set
    }()

    static func foundationQuery(_ text: String) -> String {
        text.addingPercentEncoding(withAllowedCharacters: Self.unreserved)!
    }

    static func foundationForm(_ text: String) -> String {
        var kept = CharacterSet.alphanumerics.intersection(CharacterSet(charactersIn: Unicode.Scalar(0)..<Unicode.Scalar(128)))
        kept.insert(charactersIn: "*-._ ")
        return text.addingPercentEncoding(withAllowedCharacters: kept)!.replacingOccurrences(of: " ", with: "+")
    }

    @Test(arguments: [
        ("", ""), ("plain", "plain"), ("a b", "a%20b"), ("a+b", "a%2Bb"), ("100%", "100%25"), ("a&b=c", "a%26b%3Dc"),
        ("~-._", "~-._"), ("é", "%C3%A9"), ("😀", "%F0%9F%98%80"), ("\r\n\0", "%0D%0A%00"), ("/?#[]@", "%2F%3F%23%5B%5D%40"),
    ])
    func queryValuesKeepOnlyUnreservedBytes(_ input: String, _ expected: String) {
        #expect(QueryEncoding.escape(input) == expected)
        #expect(QueryEncoding.escape(input) == Self.foundationQuery(input))
    }

    @Test(arguments: [("a b", "a+b"), ("a+b", "a%2Bb"), ("*-._~", "*-._%7E"), ("é ü", "%C3%A9+%C3%BC"), ("", "")])
    func formFieldsTurnSpacesIntoPlus(_ input: String, _ expected: String) {
        #expect(FormEncoding.escape(input) == expected)
        #expect(FormEncoding.escape(input) == Self.foundationForm(input))
    }

    @Test
    func randomStringsEncodeAsFoundationDid() {
        // Characters from ASCII (controls included), Latin-1, combining marks, CJK and emoji.
        let pools: [ClosedRange<UInt32>] = [0...0x7F, 0x80...0xFF, 0x300...0x36F, 0x4E00...0x4E80, 0x1F600...0x1F64F]
        var generator = SplitMix64(seed: 0x5EED)
        for _ in 0..<5_000 {
            var scalars = String.UnicodeScalarView()
            for _ in 0..<Int(generator.next() % 24) {
                let pool = pools[Int(generator.next() % UInt64(pools.count))]
                let value = pool.lowerBound + UInt32(generator.next() % UInt64(pool.count))
                if let scalar = Unicode.Scalar(value) { scalars.append(scalar) }
            }
            let text = String(scalars)
            #expect(QueryEncoding.escape(text) == Self.foundationQuery(text), "\(text.debugDescription)")
            #expect(FormEncoding.escape(text) == Self.foundationForm(text), "\(text.debugDescription)")
        }
    }
}

/// A small seeded generator, so a failure repeats.
struct SplitMix64: RandomNumberGenerator {
    private var state: UInt64
    init(seed: UInt64) { self.state = seed }
    mutating func next() -> UInt64 {
        self.state &+= 0x9E37_79B9_7F4A_7C15
        var z = self.state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
