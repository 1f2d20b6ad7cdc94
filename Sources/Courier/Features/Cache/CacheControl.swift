import Foundation
import HTTPTypes

/// The directives of `Cache-Control` header fields (RFC 9111 §5.2), names lower-cased.
package struct CacheControl: Sendable, Equatable {
    package private(set) var directives: [String: String?] = [:]

    package init(_ fields: HTTPFields) {
        for value in fields[values: .cacheControl] {
            self.parse(value)
        }
    }

    package init(_ text: String) {
        self.parse(text)
    }

    /// Reads one field value byte by byte (``FieldText``): a `,` or `=` followed by a combining
    /// mark still ends a directive.
    private mutating func parse(_ text: String) {
        let bytes = Array(text.utf8)
        let comma = UInt8(ascii: ",")
        let equals = UInt8(ascii: "=")
        let quote = UInt8(ascii: "\"")
        let backslash = UInt8(ascii: "\\")
        var index = 0
        while index < bytes.count {
            while index < bytes.count, bytes[index] == 0x20 || bytes[index] == 0x09 || bytes[index] == comma { index += 1 }
            let nameStart = index
            while index < bytes.count, bytes[index] != equals, bytes[index] != comma { index += 1 }
            let key = FieldText.token(String(decoding: bytes[nameStart..<index], as: UTF8.self))
            var value: String?
            if index < bytes.count, bytes[index] == equals {
                index += 1
                if index < bytes.count, bytes[index] == quote {
                    // A quoted string (RFC 9110 §5.6.4): a backslash takes the next byte as it is.
                    index += 1
                    var unquoted: [UInt8] = []
                    while index < bytes.count, bytes[index] != quote {
                        if bytes[index] == backslash { index += 1 }
                        if index < bytes.count { unquoted.append(bytes[index]) }
                        index += 1
                    }
                    value = String(decoding: unquoted, as: UTF8.self)
                    while index < bytes.count, bytes[index] != comma { index += 1 }
                } else {
                    let valueStart = index
                    while index < bytes.count, bytes[index] != comma { index += 1 }
                    value = FieldText.trimmed(String(decoding: bytes[valueStart..<index], as: UTF8.self))
                }
            }
            if !key.isEmpty, self.directives[key] == nil {
                self.directives[key] = .some(value)
            }
        }
    }

    func has(_ name: String) -> Bool { self.directives[name] != nil }

    /// A delta-seconds directive (`max-age=60`); an invalid value counts as 0 where the RFC says
    /// so for freshness (a stale response is the safe reading), and a value past 2^31 counts as
    /// 2^31 (RFC 9111 §1.2.2).
    func seconds(_ name: String) -> TimeInterval? {
        guard let entry = self.directives[name] else { return nil }
        guard let text = entry, let value = UntrustedNumber.deltaSeconds(text) else { return 0 }
        return TimeInterval(value)
    }
}
