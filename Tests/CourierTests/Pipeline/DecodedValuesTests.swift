import Courier
import Foundation
import Testing

/// The memo of values decoded from cached bodies is bounded by count and by bytes.
@Suite("Decoded-value memo")
struct DecodedValuesTests {
    struct Item: Sendable, Equatable { var size: Int }

    @Test func theBodiesKeptNeverExceedTheByteBoundWhateverTheCountBound() {
        let memo = DecodedValues(capacity: 1_000, maxBytes: 1 << 20)
        var decodes = 0
        for index in 0..<200 {
            let body = Data(repeating: UInt8(index % 251), count: 100_000)
            _ = memo.value(key: "k\(index)", body: body) {
                decodes += 1
                return Item(size: body.count)
            }
            #expect(memo.usage.bytes <= 1 << 20)
        }
        #expect(decodes == 200)
        #expect(memo.usage.count == 10)  // 10 × 100,000 bytes fit in 1 MiB, 11 do not
        // The most recent are the ones kept: decoding them again is skipped.
        _ = memo.value(key: "k199", body: Data(repeating: UInt8(199 % 251), count: 100_000)) {
            decodes += 1
            return Item(size: 0)
        }
        #expect(decodes == 200)
        _ = memo.value(key: "k0", body: Data(repeating: 0, count: 100_000)) {
            decodes += 1
            return Item(size: 0)
        }
        #expect(decodes == 201)
    }

    @Test func theCountBoundStillApplies() {
        let memo = DecodedValues(capacity: 3, maxBytes: 1 << 20)
        for index in 0..<10 {
            _ = memo.value(key: "k\(index)", body: Data([UInt8(index)])) { Item(size: 1) }
        }
        #expect(memo.usage.count == 3)
        #expect(memo.usage.bytes == 3)
    }

    @Test func aBodyLargerThanAQuarterOfTheBoundIsNotKept() {
        let memo = DecodedValues(capacity: 10, maxBytes: 1_000)
        _ = memo.value(key: "small", body: Data(count: 250)) { Item(size: 250) }
        var decodes = 0
        for _ in 0..<3 {
            _ = memo.value(key: "big", body: Data(count: 251)) {
                decodes += 1
                return Item(size: 251)
            }
        }
        #expect(decodes == 3)
        #expect(memo.usage.count == 1)
        #expect(memo.usage.bytes == 250)
    }

    @Test func hostileBoundsDoNotTrap() {
        let memo = DecodedValues(capacity: -5, maxBytes: Int.min)
        let value = memo.value(key: "k", body: Data([1])) { Item(size: 1) }
        #expect(value == Item(size: 1))
        #expect(memo.usage.count == 0)
    }
}
