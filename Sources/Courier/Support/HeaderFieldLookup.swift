import HTTPTypes

extension HTTPFields {
    /// The value of the fields named `name` as `self[name]` gives it (all of them joined), found
    /// by a scan of the fields.
    ///
    /// `self[name]` joins the values through a generic sequence even when there is one; on a
    /// request's hot path, where a response has a handful of fields and the name at most once,
    /// that join cost more than the rest of the lookup (measured: Benchmarks/README.md,
    /// "Performance choices in the code"). Two or more fields of the name still give
    /// `self[name]`'s joined value.
    package func combinedValue(_ name: HTTPField.Name) -> String? {
        var found: String?
        for field in self where field.name == name {
            if found != nil { return self[name] }
            found = field.value
        }
        return found
    }
}

extension UntrustedNumber {
    /// A `Content-Length` value (RFC 9110 §8.6: `1*DIGIT`, between optional spaces and tabs,
    /// RFC 9110 §5.5), saturating at `Int.max`; `nil` for anything else (a sign, a list, the
    /// empty value, any other character).
    package static func contentLength(_ value: String) -> Int? {
        var value = value
        return value.withUTF8 { bytes -> Int? in
            var start = 0
            var end = bytes.count
            while start < end, bytes[start] == UInt8(ascii: " ") || bytes[start] == UInt8(ascii: "\t") { start += 1 }
            while end > start, bytes[end - 1] == UInt8(ascii: " ") || bytes[end - 1] == UInt8(ascii: "\t") { end -= 1 }
            return UntrustedNumber.digits(bytes: UnsafeBufferPointer(rebasing: bytes[start..<end]))
        }
    }
}
