import Courier
import Testing

@Suite("Request ids")
struct RequestIDTests {
    @Test
    func descriptionIsEightLowercaseHexDigitsOfTheValue() {
        var sawLeadingZero = false
        // Enough ids that some have a leading zero nibble (one in sixteen).
        for _ in 0..<512 {
            let id = RequestID()
            let text = id.description
            #expect(text.utf8.count == 8)
            #expect(text.allSatisfy { "0123456789abcdef".contains($0) })
            #expect(UInt32(text, radix: 16) == id.value)
            if text.hasPrefix("0") { sawLeadingZero = true }
        }
        #expect(sawLeadingZero)
    }

    @Test
    func idsAreDistinct() {
        let ids = (0..<10_000).map { _ in RequestID() }
        #expect(Set(ids).count == ids.count)
    }
}
