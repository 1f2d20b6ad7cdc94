import Foundation

// Pure byte-range logic for partial content: the `Range` request header and the
// `Content-Range` response header (RFC 9110 §14), partial bodies a cache may hold and combine
// (RFC 9111 §3.3–3.4), and the strong validator comparison that gates combining (RFC 9110
// §8.8.3.2). Everything works on the UTF-8 bytes of the field value, so no grapheme cluster can
// hide a delimiter, and every number is parsed with overflow checks: hostile input gives `nil`,
// never a trap.

/// One byte range of a `Range: bytes=…` request header (RFC 9110 §14.1.2, §14.2).
package struct ByteRangeRequest: Sendable, Hashable {
    /// The three forms a byte range takes: `first-last`, `first-`, and the suffix `-length`.
    package enum Spec: Sendable, Hashable {
        /// `first-last`: positions `first` through `last`, both inclusive.
        case closed(first: Int, last: Int)
        /// `first-`: from `first` to the end of the representation.
        case from(first: Int)
        /// `-length`: the last `length` bytes of the representation.
        case suffix(length: Int)
    }

    /// The form and numbers of this range.
    package let spec: Spec

    /// A range of the given form; `nil` when a number is negative or `last` is before `first`.
    package init?(_ spec: Spec) {
        switch spec {
        case let .closed(first, last): guard first >= 0, last >= first else { return nil }
        case let .from(first): guard first >= 0 else { return nil }
        case let .suffix(length): guard length >= 0 else { return nil }
        }
        self.spec = spec
    }

    /// The single range a `Range` header value asks for; `nil` when the value is malformed, uses
    /// another unit, or lists several ranges (not supported: the caller bypasses the cache).
    ///
    /// The unit is matched case-insensitively (RFC 9110 §14.1); whitespace around the whole value
    /// is ignored, but none is allowed inside it (`ranges-specifier = range-unit "=" range-set`).
    package static func parse(_ header: String) -> ByteRangeRequest? {
        let value = trimmedOWS(Array(header.utf8)[...])
        guard let equals = value.firstIndex(of: UInt8(ascii: "=")),
            isBytesUnit(value[..<equals])
        else { return nil }
        let set = value[(equals + 1)...]
        guard !set.contains(UInt8(ascii: ",")),
            let dash = set.firstIndex(of: UInt8(ascii: "-"))
        else { return nil }
        let firstText = set[..<dash]
        let lastText = set[(dash + 1)...]
        if firstText.isEmpty {
            guard let length = byteRangeNumber(lastText) else { return nil }
            return ByteRangeRequest(.suffix(length: length))
        }
        guard let first = byteRangeNumber(firstText) else { return nil }
        if lastText.isEmpty { return ByteRangeRequest(.from(first: first)) }
        guard let last = byteRangeNumber(lastText) else { return nil }
        return ByteRangeRequest(.closed(first: first, last: last))
    }

    /// The header value asking for this range, e.g. `bytes=0-99`, `bytes=100-` or `bytes=-50`.
    package var header: String {
        switch self.spec {
        case let .closed(first, last): "bytes=\(first)-\(last)"
        case let .from(first): "bytes=\(first)-"
        case let .suffix(length): "bytes=-\(length)"
        }
    }

    /// The byte positions this range selects in a representation of `length` bytes; `nil` when
    /// it is unsatisfiable there (RFC 9110 §14.1.1: first position past the end, or `-0`).
    ///
    /// A last position past the end is clamped to `length - 1`; a suffix longer than the
    /// representation selects all of it.
    package func resolve(length: Int) -> ClosedRange<Int>? {
        guard length > 0 else { return nil }
        switch self.spec {
        case let .closed(first, last):
            guard first < length, last >= first else { return nil }
            return first...Swift.min(last, length - 1)
        case let .from(first):
            guard first < length else { return nil }
            return first...(length - 1)
        case let .suffix(suffixLength):
            guard suffixLength > 0 else { return nil }
            return (length - Swift.min(suffixLength, length))...(length - 1)
        }
    }
}

/// A `Content-Range: bytes first-last/complete` response header, `complete` a number or `*`
/// (RFC 9110 §14.4).
package struct ContentRangeHeader: Sendable, Hashable {
    /// The byte positions the enclosed part holds, both inclusive.
    package let range: ClosedRange<Int>
    /// The length of the whole representation, or `nil` when the server sent `*`.
    package let completeLength: Int?

    /// A content range; `nil` when a position is negative, or the range ends at or past a known
    /// complete length (or at `Int.max`, where its byte count would not fit).
    package init?(range: ClosedRange<Int>, completeLength: Int?) {
        guard range.lowerBound >= 0, range.upperBound < Int.max else { return nil }
        if let completeLength, range.upperBound >= completeLength { return nil }
        self.range = range
        self.completeLength = completeLength
    }

    /// The content range a `Content-Range` header value states; `nil` when it is malformed, uses
    /// another unit, is the unsatisfied form `bytes */length`, or is inconsistent (last before
    /// first, or last at or past the complete length).
    ///
    /// The unit is matched case-insensitively and must be followed by exactly one space
    /// (`Content-Range = range-unit SP ( range-resp / unsatisfied-range )`); whitespace around
    /// the whole value is ignored.
    package static func parse(_ header: String) -> ContentRangeHeader? {
        let value = trimmedOWS(Array(header.utf8)[...])
        guard let space = value.firstIndex(of: UInt8(ascii: " ")),
            isBytesUnit(value[..<space])
        else { return nil }
        let rest = value[(space + 1)...]
        guard let slash = rest.firstIndex(of: UInt8(ascii: "/")) else { return nil }
        let inclusive = rest[..<slash]
        let completeText = rest[(slash + 1)...]
        guard let dash = inclusive.firstIndex(of: UInt8(ascii: "-")),
            let first = byteRangeNumber(inclusive[..<dash]),
            let last = byteRangeNumber(inclusive[(dash + 1)...]),
            last >= first
        else { return nil }
        var completeLength: Int?
        if !completeText.elementsEqual([UInt8(ascii: "*")]) {
            guard let complete = byteRangeNumber(completeText) else { return nil }
            completeLength = complete
        }
        return ContentRangeHeader(range: first...last, completeLength: completeLength)
    }

    /// The complete length an unsatisfied-range `Content-Range` states (`bytes */1000`, sent
    /// with a 416, RFC 9110 §14.4); `nil` for any other value.
    package static func unsatisfiedLength(_ header: String) -> Int? {
        let value = trimmedOWS(Array(header.utf8)[...])
        guard let space = value.firstIndex(of: UInt8(ascii: " ")), isBytesUnit(value[..<space]) else { return nil }
        let rest = value[(space + 1)...]
        guard rest.first == UInt8(ascii: "*"), rest.dropFirst().first == UInt8(ascii: "/") else { return nil }
        return byteRangeNumber(rest.dropFirst(2))
    }

    /// The header value stating this range, e.g. `bytes 0-99/1000` or `bytes 0-99/*`.
    package var header: String {
        let complete = self.completeLength.map(String.init) ?? "*"
        return "bytes \(self.range.lowerBound)-\(self.range.upperBound)/\(complete)"
    }
}

/// The bytes of a representation held from some offset: a partial response body, or several
/// combined (RFC 9111 §3.3–3.4).
package struct PartialBody: Sendable, Hashable {
    /// The byte positions `bytes` covers, both inclusive.
    package let range: ClosedRange<Int>
    /// The bytes at those positions; `bytes.count == range.count`.
    package let bytes: Data
    /// The length of the whole representation, when known.
    package let completeLength: Int?

    /// A partial body; `nil` when the byte count differs from the range's, a position is
    /// negative, or the range ends at or past a known complete length.
    package init?(range: ClosedRange<Int>, bytes: Data, completeLength: Int?) {
        guard range.lowerBound >= 0, range.upperBound < Int.max,
            bytes.count == range.upperBound - range.lowerBound + 1
        else { return nil }
        if let completeLength, range.upperBound >= completeLength { return nil }
        self.range = range
        self.bytes = bytes.startIndex == 0 ? bytes : Data(bytes)
        self.completeLength = completeLength
    }

    /// The body of a 206 response with the given `Content-Range`; `nil` when the byte count
    /// does not match the range.
    package init?(_ contentRange: ContentRangeHeader, bytes: Data) {
        self.init(range: contentRange.range, bytes: bytes, completeLength: contentRange.completeLength)
    }

    /// Whether these bytes are the whole representation: positions `0...(completeLength - 1)`.
    package var isComplete: Bool {
        guard let completeLength else { return false }
        return self.range.lowerBound == 0 && self.range.upperBound == completeLength - 1
    }

    /// The union of this body and a newer one when their ranges overlap or touch; `nil` when
    /// there is a gap between them or both know a complete length and they differ.
    ///
    /// Where the ranges overlap, the bytes of `other` win. The caller must first check the two
    /// responses share a strong validator (RFC 9111 §3.4, `Validators.sameStrong`).
    package func merged(with other: PartialBody) -> PartialBody? {
        if let mine = self.completeLength, let theirs = other.completeLength, mine != theirs { return nil }
        // Upper bounds are below Int.max (init), so `+ 1` cannot overflow.
        guard other.range.lowerBound <= self.range.upperBound + 1,
            self.range.lowerBound <= other.range.upperBound + 1
        else { return nil }
        var bytes = Data()
        if self.range.lowerBound < other.range.lowerBound {
            bytes.append(self.bytes(from: self.range.lowerBound, through: other.range.lowerBound - 1))
        }
        bytes.append(other.bytes)
        if self.range.upperBound > other.range.upperBound {
            bytes.append(self.bytes(from: other.range.upperBound + 1, through: self.range.upperBound))
        }
        let range = Swift.min(self.range.lowerBound, other.range.lowerBound)...Swift.max(self.range.upperBound, other.range.upperBound)
        return PartialBody(range: range, bytes: bytes, completeLength: self.completeLength ?? other.completeLength)
    }

    /// The bytes at positions `wanted` when they lie wholly inside `range`, else `nil`.
    package func slice(_ wanted: ClosedRange<Int>) -> Data? {
        guard wanted.lowerBound >= self.range.lowerBound, wanted.upperBound <= self.range.upperBound else { return nil }
        return self.bytes(from: wanted.lowerBound, through: wanted.upperBound)
    }

    /// The bytes at positions `first...last`, which the caller has checked lie inside `range`.
    private func bytes(from first: Int, through last: Int) -> Data {
        let start = self.bytes.startIndex + (first - self.range.lowerBound)
        let end = self.bytes.startIndex + (last - self.range.lowerBound) + 1
        return Data(self.bytes[start..<end])
    }
}

/// Entity-tag checks for combining partial responses (RFC 9110 §8.8.3, RFC 9111 §3.4).
package enum Validators {
    /// `value` when it is a strong entity tag (`"…"`, no `W/` prefix, only `etagc` inside), else `nil`.
    package static func strongETag(_ value: String?) -> String? {
        guard let value else { return nil }
        let bytes = Array(value.utf8)
        guard bytes.count >= 2, bytes.first == UInt8(ascii: "\""), bytes.last == UInt8(ascii: "\"") else { return nil }
        // etagc = %x21 / %x23-7E / obs-text
        for byte in bytes.dropFirst().dropLast() {
            guard byte == 0x21 || (0x23...0x7E).contains(byte) || byte >= 0x80 else { return nil }
        }
        return value
    }

    /// Whether `a` and `b` are both strong entity tags with the same bytes: the strong
    /// comparison of RFC 9110 §8.8.3.2.
    package static func sameStrong(_ a: String?, _ b: String?) -> Bool {
        guard let a = strongETag(a), let b = strongETag(b) else { return false }
        // Byte-for-byte, not String's Unicode canonical equivalence.
        return a.utf8.elementsEqual(b.utf8)
    }
}

/// `bytes` without leading or trailing spaces and horizontal tabs (OWS, RFC 9110 §5.6.3).
private func trimmedOWS(_ bytes: ArraySlice<UInt8>) -> ArraySlice<UInt8> {
    let isOWS = { (byte: UInt8) in byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") }
    guard let first = bytes.firstIndex(where: { !isOWS($0) }), let last = bytes.lastIndex(where: { !isOWS($0) }) else { return [] }
    return bytes[first...last]
}

/// Whether `bytes` spell the range unit `bytes`, in any ASCII case (RFC 9110 §14.1).
private func isBytesUnit(_ bytes: ArraySlice<UInt8>) -> Bool {
    // ASCII letters only differ from their lower case in bit 0x20; no other byte maps onto them.
    bytes.count == 5 && zip(bytes, "bytes".utf8).allSatisfy { $0 | 0x20 == $1 }
}

/// The value of one or more ASCII digits and nothing else; `nil` for anything else (empty, a
/// sign, spaces) or a value that does not fit in `Int`.
private func byteRangeNumber(_ bytes: ArraySlice<UInt8>) -> Int? {
    guard !bytes.isEmpty else { return nil }
    var value = 0
    for byte in bytes {
        guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
        let (shifted, shiftOverflow) = value.multipliedReportingOverflow(by: 10)
        let (sum, sumOverflow) = shifted.addingReportingOverflow(Int(byte - UInt8(ascii: "0")))
        guard !shiftOverflow, !sumOverflow else { return nil }
        value = sum
    }
    return value
}
