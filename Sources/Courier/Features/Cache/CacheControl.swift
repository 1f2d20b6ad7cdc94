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
