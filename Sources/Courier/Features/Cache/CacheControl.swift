import Foundation
import HTTPTypes

/// The directives of `Cache-Control` header fields (RFC 9111 §5.2), names lower-cased.
struct CacheControl: Sendable, Equatable {
    private(set) var directives: [String: String?] = [:]

    init(_ fields: HTTPFields) {
        for value in fields[values: .cacheControl] {
            self.parse(value)
        }
    }

    init(_ text: String) {
        self.parse(text)
    }

    private mutating func parse(_ text: String) {
        var scanner = Substring(text)
        while !scanner.isEmpty {
            scanner = scanner.drop { $0 == " " || $0 == "\t" || $0 == "," }
            let name = scanner.prefix { $0 != "=" && $0 != "," }
            scanner = scanner.dropFirst(name.count)
            let key = name.trimmingCharacters(in: .whitespaces).lowercased()
            var value: String?
            if scanner.first == "=" {
                scanner = scanner.dropFirst()
                if scanner.first == "\"" {
                    scanner = scanner.dropFirst()
                    var text = ""
                    while let character = scanner.first, character != "\"" {
                        if character == "\\" { scanner = scanner.dropFirst() }
                        if let next = scanner.first { text.append(next) }
                        scanner = scanner.dropFirst()
                    }
                    scanner = scanner.dropFirst()
                    value = text
                    scanner = scanner.drop { $0 != "," }
                } else {
                    let raw = scanner.prefix { $0 != "," }
                    scanner = scanner.dropFirst(raw.count)
                    value = raw.trimmingCharacters(in: .whitespaces)
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

/// HTTP dates (RFC 9110 §5.6.7): IMF-fixdate, and the obsolete RFC 850 and asctime forms.
package enum HTTPDate {
    private static let obsoleteFormats = ["EEEE, dd-MMM-yy HH:mm:ss zzz", "EEE MMM d HH:mm:ss yyyy"]
    private static let parsers: Locked<[DateFormatter]> = Locked(Self.obsoleteFormats.map { format in
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = format
        return formatter
    })
    private static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"].map { Array($0.utf8) }

    /// The date an HTTP date field holds, or `nil` when it is not a date.
    ///
    /// IMF-fixdate, what servers send, is read directly from its bytes (every cache lookup reads
    /// `Date`); the obsolete forms go through `DateFormatter`.
    package static func parse(_ text: String) -> Date? {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        if let date = Self.imfFixdate(Array(trimmed.utf8)) { return date }
        return Self.parsers.withLock { parsers in
            for parser in parsers {
                if let date = parser.date(from: trimmed) { return date }
            }
            return nil
        }
    }

    /// `Sun, 06 Nov 1994 08:49:37 GMT`.
    private static func imfFixdate(_ bytes: [UInt8]) -> Date? {
        guard bytes.count == 29, bytes[3] == UInt8(ascii: ","), bytes[4] == 0x20, bytes[7] == 0x20, bytes[11] == 0x20,
              bytes[16] == 0x20, bytes[19] == UInt8(ascii: ":"), bytes[22] == UInt8(ascii: ":"), bytes[25] == 0x20,
              bytes[26...] == [UInt8(ascii: "G"), UInt8(ascii: "M"), UInt8(ascii: "T")][...],
              let day = number(bytes[5...6]), let year = number(bytes[12...15]), let hour = number(bytes[17...18]),
              let minute = number(bytes[20...21]), let second = number(bytes[23...24]),
              let monthIndex = Self.months.firstIndex(where: { $0[...] == bytes[8...10] }),
              (1...31).contains(day), hour < 24, minute < 60, second < 61
        else { return nil }
        // Days from the civil date (proleptic Gregorian), counting months from March.
        let month = monthIndex + 1
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        let days = era * 146_097 + dayOfEra - 719_468
        return Date(timeIntervalSince1970: TimeInterval(days * 86_400 + hour * 3_600 + minute * 60 + second))
    }

    private static func number(_ digits: ArraySlice<UInt8>) -> Int? {
        var value = 0
        for digit in digits {
            guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(digit) else { return nil }
            value = value * 10 + Int(digit - UInt8(ascii: "0"))
        }
        return value
    }
}
