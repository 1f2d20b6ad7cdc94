import Courier
import Foundation
import Testing

@Suite("Byte ranges (RFC 9110 §14)")
struct ByteRangesTests {
    typealias Spec = ByteRangeRequest.Spec

    /// A number one past `Int.max`, and one far past it: both must be rejected, not trap.
    static let justTooBig = String(UInt(Int.max) + 1)
    static let huge = "99999999999999999999999"

    // MARK: Range request header (RFC 9110 §14.2, §14.1.2)

    static let rangeHeaders: [(String, Spec?)] = [
        ("bytes=0-99", .closed(first: 0, last: 99)),
        ("bytes=100-", .from(first: 100)),
        ("bytes=-50", .suffix(length: 50)),
        ("bytes=0-0", .closed(first: 0, last: 0)),
        ("bytes=7-7", .closed(first: 7, last: 7)),
        ("BYTES=0-1", .closed(first: 0, last: 1)),  // §14.1: units are case-insensitive
        ("ByTeS=2-", .from(first: 2)),
        ("  bytes=1-2\t", .closed(first: 1, last: 2)),  // OWS around the whole field value
        ("bytes=007-010", .closed(first: 7, last: 10)),
        ("bytes=-0", .suffix(length: 0)),  // valid syntax; unsatisfiable (§14.1.1)
        ("bytes=0-\(Int.max)", .closed(first: 0, last: Int.max)),
        ("bytes=\(Int.max)-", .from(first: Int.max)),
        // Malformed or unsupported: nil, and the caller bypasses the cache.
        ("", nil),
        ("   ", nil),
        ("bytes", nil),
        ("bytes=", nil),
        ("bytes=-", nil),
        ("bytes=--1", nil),
        ("bytes=-1-", nil),
        ("bytes=1-2-3", nil),
        ("bytes=1-2,3-4", nil),  // several ranges: unsupported
        ("bytes=0-1,", nil),
        ("bytes=,0-1", nil),
        ("items=0-1", nil),
        ("byte=0-1", nil),
        ("bytesx=0-1", nil),
        ("=0-1", nil),
        ("bytes0-1", nil),
        ("bytes=5-1", nil),  // last before first
        ("bytes = 0-1", nil),  // no whitespace around "=" in the grammar
        ("bytes =0-1", nil),
        ("bytes= 0-1", nil),
        ("bytes=0 -1", nil),
        ("bytes=0- 1", nil),
        ("bytes=0-1 2", nil),
        ("bytes=+1-2", nil),
        ("bytes=-+1", nil),
        ("bytes=1-+2", nil),
        ("bytes=0x10-", nil),
        ("bytes=a-b", nil),
        ("bytes=1.5-2", nil),
        ("bytes=\u{FF11}-2", nil),  // fullwidth digit one
        ("bytes=0-\u{301}1", nil),  // combining mark fused onto "-"
        ("bytés=0-1", nil),
        ("bytes=0-\(huge)", nil),
        ("bytes=\(huge)-", nil),
        ("bytes=-\(huge)", nil),
        ("bytes=\(justTooBig)-", nil),
        ("bytes=0-\(justTooBig)", nil),
        ("bytes=-\(justTooBig)", nil),
    ]

    @Test("Range: bytes=… parses a single range and rejects everything else (RFC 9110 §14.2)", arguments: rangeHeaders)
    func parsesRangeHeader(_ header: String, _ expected: Spec?) {
        #expect(ByteRangeRequest.parse(header)?.spec == expected)
    }

    static let resolutions: [(Spec, Int, ClosedRange<Int>?)] = [
        (.closed(first: 0, last: 99), 1000, 0...99),
        (.closed(first: 0, last: 99), 50, 0...49),  // last-pos clamped to length - 1
        (.closed(first: 49, last: 99), 50, 49...49),
        (.closed(first: 50, last: 99), 50, nil),  // first-pos at the end: unsatisfiable
        (.closed(first: 0, last: Int.max), 10, 0...9),
        (.closed(first: Int.max - 1, last: Int.max), Int.max, (Int.max - 1)...(Int.max - 1)),
        (.from(first: 10), 100, 10...99),
        (.from(first: 99), 100, 99...99),
        (.from(first: 100), 100, nil),
        (.from(first: Int.max), Int.max, nil),
        (.suffix(length: 10), 100, 90...99),
        (.suffix(length: 100), 100, 0...99),
        (.suffix(length: 500), 100, 0...99),  // longer than the representation: all of it
        (.suffix(length: 0), 100, nil),  // -0 is unsatisfiable
        (.suffix(length: Int.max), Int.max, 0...(Int.max - 1)),
        (.closed(first: 0, last: 0), 0, nil),  // nothing to select in an empty representation
        (.from(first: 0), 0, nil),
        (.suffix(length: 1), 0, nil),
        (.from(first: 0), -5, nil),
    ]

    @Test("A range resolves to positions within the representation (RFC 9110 §14.1.1–14.1.2)", arguments: resolutions)
    func resolvesAgainstLength(_ spec: Spec, _ length: Int, _ expected: ClosedRange<Int>?) throws {
        let request = try #require(ByteRangeRequest(spec))
        #expect(request.resolve(length: length) == expected)
    }

    @Test("A range cannot be built negative or backwards (RFC 9110 §14.1.2)")
    func rejectsInvalidSpecs() {
        #expect(ByteRangeRequest(.closed(first: 5, last: 1)) == nil)
        #expect(ByteRangeRequest(.closed(first: -1, last: 1)) == nil)
        #expect(ByteRangeRequest(.from(first: -1)) == nil)
        #expect(ByteRangeRequest(.suffix(length: -1)) == nil)
        #expect(ByteRangeRequest(.closed(first: 1, last: 5))?.spec == .closed(first: 1, last: 5))
    }

    @Test("A range formats back to the header it was parsed from (RFC 9110 §14.2)", arguments: ["bytes=0-99", "bytes=100-", "bytes=-50"])
    func formatsRangeHeader(_ header: String) throws {
        let request = try #require(ByteRangeRequest.parse(header))
        #expect(request.header == header)
        #expect(ByteRangeRequest.parse(request.header) == request)
    }

    // MARK: Content-Range response header (RFC 9110 §14.4)

    static let contentRanges: [(String, ClosedRange<Int>?, Int?)] = [
        ("bytes 0-99/1000", 0...99, 1000),
        ("bytes 0-99/*", 0...99, nil),
        ("bytes 0-0/1", 0...0, 1),
        ("bytes 9-9/10", 9...9, 10),
        ("BYTES 1-2/3", 1...2, 3),  // §14.1: units are case-insensitive
        ("  bytes 42-42/43\t", 42...42, 43),  // OWS around the whole field value
        ("bytes 0-\(Int.max - 1)/*", 0...(Int.max - 1), nil),
        ("bytes 0-\(Int.max - 1)/\(Int.max)", 0...(Int.max - 1), Int.max),
        // Malformed, inconsistent or unsatisfied: nil.
        ("", nil, nil),
        ("bytes", nil, nil),
        ("bytes ", nil, nil),
        ("bytes 0-99/50", nil, nil),  // last past the complete length
        ("bytes 0-50/50", nil, nil),
        ("bytes 0-0/0", nil, nil),
        ("bytes 5-1/10", nil, nil),  // last before first
        ("bytes */1000", nil, nil),  // unsatisfied-range form
        ("bytes */*", nil, nil),
        ("bytes  0-1/2", nil, nil),  // exactly one SP after the unit
        ("bytes\t0-1/2", nil, nil),
        ("bytes0-1/2", nil, nil),
        ("bytes=0-1/2", nil, nil),
        ("bytes 0 -1/2", nil, nil),
        ("bytes 0- 1/2", nil, nil),
        ("bytes 0-1 /2", nil, nil),
        ("bytes 0-1/ 2", nil, nil),
        ("bytes 0-1/2 3", nil, nil),
        ("bytes 0-1/2/3", nil, nil),
        ("bytes 0-1", nil, nil),
        ("bytes 0-/2", nil, nil),
        ("bytes -1/2", nil, nil),
        ("bytes --1/2", nil, nil),
        ("bytes 0-1,2-3/4", nil, nil),
        ("bytes 0-1/-2", nil, nil),
        ("bytes 0-1/+2", nil, nil),
        ("bytes +0-1/2", nil, nil),
        ("bytes 0-1/", nil, nil),
        ("bytes 0-1/**", nil, nil),
        ("items 0-1/2", nil, nil),
        ("bytes 0-\(huge)/*", nil, nil),
        ("bytes 0-1/\(huge)", nil, nil),
        ("bytes \(huge)-\(huge)/*", nil, nil),
        ("bytes 0-\(justTooBig)/*", nil, nil),
        ("bytes 0-\(Int.max)/*", nil, nil),  // its byte count would not fit in Int
    ]

    @Test(
        "Content-Range: bytes first-last/complete parses, and inconsistent values are rejected (RFC 9110 §14.4)", arguments: contentRanges)
    func parsesContentRange(_ header: String, _ range: ClosedRange<Int>?, _ completeLength: Int?) {
        let parsed = ContentRangeHeader.parse(header)
        #expect(parsed?.range == range)
        if range != nil {
            #expect(parsed?.completeLength == completeLength)
        }
    }

    @Test("Content-Range formats as bytes first-last/complete or /* (RFC 9110 §14.4)")
    func formatsContentRange() throws {
        #expect(ContentRangeHeader(range: 0...99, completeLength: 1000)?.header == "bytes 0-99/1000")
        #expect(ContentRangeHeader(range: 0...99, completeLength: nil)?.header == "bytes 0-99/*")
        let parsed = try #require(ContentRangeHeader.parse("Bytes 5-9/*"))
        #expect(parsed.header == "bytes 5-9/*")
        #expect(ContentRangeHeader.parse(parsed.header) == parsed)
    }

    @Test("A content range cannot end at or past its complete length (RFC 9110 §14.4)")
    func rejectsInconsistentContentRange() {
        #expect(ContentRangeHeader(range: 0...10, completeLength: 10) == nil)
        #expect(ContentRangeHeader(range: -1...10, completeLength: nil) == nil)
        #expect(ContentRangeHeader(range: 0...Int.max, completeLength: nil) == nil)
        #expect(ContentRangeHeader(range: 0...9, completeLength: 10)?.completeLength == 10)
    }

    // MARK: Partial bodies (RFC 9111 §3.3–3.4)

    /// A partial body of `text`'s bytes starting at `start`.
    static func body(_ start: Int, _ text: String, complete: Int? = nil) throws -> PartialBody {
        try #require(PartialBody(range: start...(start + text.utf8.count - 1), bytes: Data(text.utf8), completeLength: complete))
    }

    @Test("A partial body's bytes must match its range (RFC 9111 §3.3)")
    func partialBodyChecksItsLength() throws {
        #expect(PartialBody(range: 0...9, bytes: Data(count: 9), completeLength: nil) == nil)
        #expect(PartialBody(range: 0...9, bytes: Data(count: 11), completeLength: nil) == nil)
        #expect(PartialBody(range: -1...8, bytes: Data(count: 10), completeLength: nil) == nil)
        #expect(PartialBody(range: 0...9, bytes: Data(count: 10), completeLength: 9) == nil)
        #expect(PartialBody(range: 0...Int.max, bytes: Data(), completeLength: nil) == nil)
        let contentRange = try #require(ContentRangeHeader.parse("bytes 10-13/20"))
        let body = try #require(PartialBody(contentRange, bytes: Data("abcd".utf8)))
        #expect(body.range == 10...13)
        #expect(body.completeLength == 20)
        #expect(PartialBody(contentRange, bytes: Data("abc".utf8)) == nil)
    }

    /// (older start, older text, newer start, newer text, merged start and text or nil).
    static let merges: [(Int, String, Int, String, Int?, String?)] = [
        (0, "aaaa", 4, "bbbb", 0, "aaaabbbb"),  // adjacent
        (4, "aaaa", 0, "bbbb", 0, "bbbbaaaa"),  // adjacent, newer first
        (0, "a", 1, "b", 0, "ab"),
        (0, "aaaa", 2, "bbbb", 0, "aabbbb"),  // overlap: the newer bytes win
        (2, "aaaa", 0, "bbbb", 0, "bbbbaa"),
        (0, "aaaaaa", 2, "bb", 0, "aabbaa"),  // newer inside older
        (2, "aa", 0, "bbbbbb", 0, "bbbbbb"),  // older inside newer
        (3, "aaaa", 3, "bbbb", 3, "bbbb"),  // same range
        (0, "aaaa", 5, "bbbb", nil, nil),  // gap of one byte
        (5, "aaaa", 0, "bbbb", nil, nil),
        (0, "a", 100, "b", nil, nil),
        (Int.max - 4, "aa", Int.max - 2, "bb", Int.max - 4, "aabb"),  // near Int.max: no overflow
        (Int.max - 2, "aa", Int.max - 5, "bb", nil, nil),
    ]

    @Test("Overlapping or adjacent partial bodies combine, newer bytes winning (RFC 9111 §3.4)", arguments: merges)
    func mergesPartialBodies(_ oldStart: Int, _ oldText: String, _ newStart: Int, _ newText: String, _ start: Int?, _ text: String?) throws
    {
        let older = try Self.body(oldStart, oldText)
        let newer = try Self.body(newStart, newText)
        let merged = older.merged(with: newer)
        #expect(merged?.range.lowerBound == start)
        #expect(merged.map { String(decoding: $0.bytes, as: UTF8.self) } == text)
        if let merged {
            #expect(merged.bytes.count == merged.range.count)
        }
    }

    @Test("Combined bodies keep the known complete length and refuse disagreeing ones (RFC 9111 §3.4)")
    func mergesCompleteLengths() throws {
        let first = try #require(PartialBody(range: 0...99, bytes: Data(repeating: 1, count: 100), completeLength: 200))
        let second = try #require(PartialBody(range: 100...199, bytes: Data(repeating: 2, count: 100), completeLength: nil))
        let whole = try #require(first.merged(with: second))
        #expect(whole.range == 0...199)
        #expect(whole.completeLength == 200)
        #expect(whole.isComplete)
        #expect(whole.bytes == Data(repeating: 1, count: 100) + Data(repeating: 2, count: 100))
        #expect(second.merged(with: first)?.completeLength == 200)

        let joined = try #require(try Self.body(0, "ab").merged(with: try Self.body(2, "cd")))
        #expect(joined.completeLength == nil)

        let disagreeing = try #require(PartialBody(range: 100...199, bytes: Data(count: 100), completeLength: 300))
        #expect(first.merged(with: disagreeing) == nil)
        #expect(disagreeing.merged(with: first) == nil)
        // A complete length the other range already runs past is inconsistent too.
        let short = try Self.body(0, "abcd", complete: 4)
        #expect(short.merged(with: try Self.body(4, "ef")) == nil)
    }

    @Test("A body is complete only when it covers 0 through complete length - 1 (RFC 9111 §3.4)")
    func knowsWhenComplete() throws {
        #expect(try Self.body(0, "abcd", complete: 4).isComplete)
        #expect(try !Self.body(0, "abc", complete: 4).isComplete)
        #expect(try !Self.body(1, "bcd", complete: 4).isComplete)
        #expect(try !Self.body(0, "abcd").isComplete)
    }

    @Test("A slice is served only from bytes wholly held (RFC 9111 §3.4, RFC 9110 §14.1.1)")
    func slicesHeldBytes() throws {
        let body = try Self.body(10, "abcdef")
        #expect(body.slice(10...15) == Data("abcdef".utf8))
        #expect(body.slice(12...13) == Data("cd".utf8))
        #expect(body.slice(15...15) == Data("f".utf8))
        #expect(body.slice(9...12) == nil)
        #expect(body.slice(14...16) == nil)
        #expect(body.slice(0...3) == nil)
        #expect(body.slice(16...20) == nil)
        #expect(body.slice(12...13)?.startIndex == 0)
    }

    @Test("Bytes handed over as a Data slice are indexed from the range start (RFC 9111 §3.3)")
    func acceptsDataSlices() throws {
        let storage = Data("xxxxabcdefyyyy".utf8)
        let window = storage[4..<10]  // startIndex 4
        let body = try #require(PartialBody(range: 100...105, bytes: window, completeLength: nil))
        #expect(body.slice(101...102) == Data("bc".utf8))
        let merged = try #require(body.merged(with: try Self.body(104, "EFG")))
        #expect(merged.bytes == Data("abcdEFG".utf8))
    }

    // MARK: Strong validators (RFC 9110 §8.8.3.2)

    static let entityTags: [(String?, String?)] = [
        ("\"abc\"", "\"abc\""),
        ("\"\"", "\"\""),  // an empty opaque tag is valid
        ("\"a!#~\"", "\"a!#~\""),
        ("\"caf\u{E9}\"", "\"caf\u{E9}\""),  // obs-text
        ("W/\"abc\"", nil),  // weak
        ("w/\"abc\"", nil),
        ("abc", nil),
        ("\"abc", nil),
        ("abc\"", nil),
        ("\"", nil),
        ("\"a\"b\"", nil),
        ("\"a b\"", nil),
        (" \"abc\"", nil),
        ("*", nil),
        ("", nil),
        (nil, nil),
    ]

    @Test("Only strong entity tags count as strong validators (RFC 9110 §8.8.3)", arguments: entityTags)
    func recognizesStrongETags(_ value: String?, _ expected: String?) {
        #expect(Validators.strongETag(value) == expected)
    }

    @Test("Strong comparison needs both tags strong and byte-for-byte equal (RFC 9110 §8.8.3.2)")
    func comparesStrongly() {
        #expect(Validators.sameStrong("\"v1\"", "\"v1\""))
        #expect(!Validators.sameStrong("\"v1\"", "\"v2\""))
        #expect(!Validators.sameStrong("\"v1\"", "\"V1\""))
        #expect(!Validators.sameStrong("W/\"v1\"", "\"v1\""))
        #expect(!Validators.sameStrong("\"v1\"", "W/\"v1\""))
        #expect(!Validators.sameStrong("W/\"v1\"", "W/\"v1\""))
        #expect(!Validators.sameStrong(nil, "\"v1\""))
        #expect(!Validators.sameStrong(nil, nil))
        // Canonically equivalent Strings with different bytes are different tags.
        let precomposed = "\"caf\u{E9}\""
        let decomposed = "\"cafe\u{301}\""
        #expect(precomposed == decomposed)
        #expect(!Validators.sameStrong(precomposed, decomposed))
    }
}
