import Foundation
import HTTPTypes

/// HTTP dates (RFC 9110 §5.6.7): IMF-fixdate, and the obsolete RFC 850 and asctime forms —
/// exactly those three grammars, nothing else (a cache MUST read any other `Expires` value as a
/// time in the past, RFC 9111 §5.3).
package enum HTTPDate {
    private static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"].map { Array($0.utf8) }
    private static let shortDays = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"].map { Array($0.utf8) }
    private static let longDays = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"].map { Array($0.utf8) }

    /// The date an HTTP date field holds, or `nil` when it is not one of the three forms.
    ///
    /// Read directly from the bytes (every cache lookup reads `Date`): no formatter, no locale,
    /// and no leniency — a one-digit hour, dashes in an IMF-fixdate, extra spaces, a missing
    /// comma, dots for colons or `UTC` for `GMT` are not dates.
    ///
    /// `ignoringCase`: day, month and zone names match in any letter case. The date formats are
    /// case-sensitive (RFC 9110 §5.6.7), but a cache SHOULD match them case-insensitively
    /// (RFC 9111 §4.2), so the cache reads `Date`, `Expires` and `Last-Modified` this way.
    package static func parse(_ text: String, ignoringCase: Bool = false) -> Date? {
        let bytes = Array(text.utf8.drop { $0 == 0x20 || $0 == 0x09 }.reversed().drop { $0 == 0x20 || $0 == 0x09 }.reversed())
        let names = ignoringCase ? Self.capitalised(bytes) : bytes
        return Self.imfFixdate(names) ?? Self.rfc850(names) ?? Self.asctime(names)
    }

    /// ``parse(_:ignoringCase:)`` ignoring case: how the cache reads dates (RFC 9111 §4.2).
    package static func parseIgnoringCase(_ text: String) -> Date? {
        Self.parse(text, ignoringCase: true)
    }

    /// `bytes` with every run of letters in the case the date formats write it: `GMT` in capitals,
    /// day and month names with a capital first letter (digits and punctuation unchanged).
    private static func capitalised(_ bytes: [UInt8]) -> [UInt8] {
        var result = bytes
        var index = 0
        while index < result.count {
            guard Self.isLetter(result[index]) else {
                index += 1
                continue
            }
            var end = index
            while end < result.count, Self.isLetter(result[end]) { end += 1 }
            let word = result[index..<end].map { $0 | 0x20 }  // lower case
            if word.elementsEqual("gmt".utf8) {
                result.replaceSubrange(index..<end, with: "GMT".utf8)
            } else {
                result.replaceSubrange(index..<end, with: [word[0] & ~0x20] + word.dropFirst())
            }
            index = end
        }
        return result
    }

    private static func isLetter(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte | 0x20)
    }

    /// `Sun, 06 Nov 1994 08:49:37 GMT`.
    private static func imfFixdate(_ bytes: [UInt8]) -> Date? {
        guard bytes.count == 29, Self.shortDays.contains(where: { $0[...] == bytes[0...2] }),
            bytes[3] == UInt8(ascii: ","), bytes[4] == 0x20, bytes[7] == 0x20, bytes[11] == 0x20, bytes[16] == 0x20,
            bytes[25] == 0x20, Self.isGMT(bytes[26...]),
            let day = number(bytes[5...6]), let month = Self.month(bytes[8...10]), let year = number(bytes[12...15])
        else { return nil }
        return Self.date(year: year, month: month, day: day, time: bytes[17...24])
    }

    /// `Sunday, 06-Nov-94 08:49:37 GMT`: a two-digit year more than 50 years ahead is the most
    /// recent past year with those digits (RFC 9110 §5.6.7).
    private static func rfc850(_ bytes: [UInt8]) -> Date? {
        guard let comma = bytes.firstIndex(of: UInt8(ascii: ",")),
            Self.longDays.contains(where: { $0[...] == bytes[..<comma] }),
            bytes.count == comma + 24
        else { return nil }
        let rest = bytes[(comma + 1)...]
        let start = rest.startIndex
        guard rest[start] == 0x20, rest[start + 3] == UInt8(ascii: "-"), rest[start + 7] == UInt8(ascii: "-"),
            rest[start + 10] == 0x20, rest[start + 19] == 0x20, Self.isGMT(rest[(start + 20)...]),
            let day = number(rest[(start + 1)...(start + 2)]), let month = Self.month(rest[(start + 4)...(start + 6)]),
            let twoDigits = number(rest[(start + 8)...(start + 9)])
        else { return nil }
        let thisYear = Calendar(identifier: .gregorian).dateComponents(in: TimeZone(identifier: "GMT")!, from: Date()).year ?? 2000
        var year = thisYear - thisYear % 100 + twoDigits
        if year > thisYear + 50 { year -= 100 }
        return Self.date(year: year, month: month, day: day, time: rest[(start + 11)...(start + 18)])
    }

    /// `Sun Nov  6 08:49:37 1994` (a one-digit day is preceded by a space).
    private static func asctime(_ bytes: [UInt8]) -> Date? {
        guard bytes.count == 24, Self.shortDays.contains(where: { $0[...] == bytes[0...2] }),
            bytes[3] == 0x20, bytes[7] == 0x20, bytes[10] == 0x20, bytes[19] == 0x20,
            let month = Self.month(bytes[4...6]), let year = number(bytes[20...23])
        else { return nil }
        let day: Int?
        if bytes[8] == 0x20 { day = number(bytes[9...9]) } else { day = number(bytes[8...9]) }
        guard let day else { return nil }
        return Self.date(year: year, month: month, day: day, time: bytes[11...18])
    }

    private static func isGMT(_ bytes: ArraySlice<UInt8>) -> Bool {
        bytes.elementsEqual("GMT".utf8)
    }

    private static func month(_ bytes: ArraySlice<UInt8>) -> Int? {
        Self.months.firstIndex(where: { $0[...] == bytes }).map { $0 + 1 }
    }

    /// The instant of a civil date and an `HH:MM:SS` time (proleptic Gregorian, GMT).
    private static func date(year: Int, month: Int, day: Int, time: ArraySlice<UInt8>) -> Date? {
        let start = time.startIndex
        guard time.count == 8, time[start + 2] == UInt8(ascii: ":"), time[start + 5] == UInt8(ascii: ":"),
            let hour = number(time[start...(start + 1)]), let minute = number(time[(start + 3)...(start + 4)]),
            let second = number(time[(start + 6)...(start + 7)]),
            (1...31).contains(day), hour < 24, minute < 60, second < 61
        else { return nil }
        // Days from the civil date, counting months from March.
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
