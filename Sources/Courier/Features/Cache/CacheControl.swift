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
    /// so for freshness (a stale response is the safe reading).
    func seconds(_ name: String) -> TimeInterval? {
        guard let entry = self.directives[name] else { return nil }
        guard let text = entry, let value = Int(text), value >= 0 else { return 0 }
        return TimeInterval(value)
    }
}

/// HTTP dates (RFC 9110 §5.6.7): IMF-fixdate, and the obsolete RFC 850 and asctime forms.
enum HTTPDate {
    private static let formats = ["EEE, dd MMM yyyy HH:mm:ss zzz", "EEEE, dd-MMM-yy HH:mm:ss zzz", "EEE MMM d HH:mm:ss yyyy"]
    private static let parsers: Locked<[DateFormatter]> = Locked(Self.formats.map { format in
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = format
        return formatter
    })

    static func parse(_ text: String) -> Date? {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        return Self.parsers.withLock { parsers in
            for parser in parsers {
                if let date = parser.date(from: trimmed) { return date }
            }
            return nil
        }
    }

    static func format(_ date: Date) -> String {
        Self.parsers.withLock { $0[0].string(from: date).replacingOccurrences(of: "UTC", with: "GMT") }
    }
}
