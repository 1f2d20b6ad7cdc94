/// Numbers read from text that came from the wire, a file or the command line: parsed without
/// ever trapping, saturating where a value is too large to represent.
package enum UntrustedNumber {
    /// The largest delta-seconds value kept: RFC 9111 §1.2.2 treats anything larger as 2^31.
    package static let deltaSecondsLimit = 2_147_483_648

    /// The value of `text` when it is one or more ASCII digits and nothing else (no sign, no
    /// spaces), saturating at `limit`; `nil` for anything else, the empty text included.
    package static func digits<Text: StringProtocol>(_ text: Text, limit: Int = .max) -> Int? {
        if let value = text.utf8.withContiguousStorageIfAvailable({ self.digits(bytes: $0, limit: limit) }) { return value }
        return Array(text.utf8).withUnsafeBufferPointer { self.digits(bytes: $0, limit: limit) }
    }

    /// ``digits(_:limit:)`` on bytes: the loop of every saturating parser of digits here (not
    /// generic, so a caller in another module runs it specialised). Byte ranges have their own
    /// loop: they refuse a value too large instead of saturating.
    package static func digits(bytes: UnsafeBufferPointer<UInt8>, limit: Int = .max) -> Int? {
        guard !bytes.isEmpty else { return nil }
        var value = 0
        for byte in bytes {
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
            if value < limit {
                let (shifted, overflowShift) = value.multipliedReportingOverflow(by: 10)
                let (sum, overflowSum) = shifted.addingReportingOverflow(Int(byte &- UInt8(ascii: "0")))
                value = overflowShift || overflowSum ? limit : Swift.min(sum, limit)
            }
        }
        return Swift.min(value, limit)
    }

    /// A delta-seconds value (RFC 9111 §1.2.2): digits only, and a value larger than 2^31 is 2^31.
    package static func deltaSeconds<Text: StringProtocol>(_ text: Text) -> Int? {
        self.digits(text, limit: self.deltaSecondsLimit)
    }

    /// `value` limited to `0...limit`; `nil` when it is not a number (NaN).
    package static func clamp(_ value: Double, to limit: Double) -> Double? {
        guard !value.isNaN else { return nil }
        return Swift.min(Swift.max(value, 0), limit)
    }
}

extension Duration {
    /// The duration in whole nanoseconds, saturating at the bounds of `Int64` instead of trapping.
    package var saturatingNanoseconds: Int64 {
        let (seconds, attoseconds) = self.components
        let (whole, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        if overflow { return seconds < 0 ? .min : .max }
        let (total, overflowSum) = whole.addingReportingOverflow(attoseconds / 1_000_000_000)
        if overflowSum { return seconds < 0 ? .min : .max }
        return total
    }
}
