/// HTTP field values read the way RFC 9110 §5.6 reads them: byte by byte, never by Swift character.
///
/// A delimiter followed by a combining mark (`,` then U+0301) is one Swift `Character`, so
/// splitting or scanning by character keeps the delimiter, and whatever follows it, inside one
/// piece: `Cache-Control: no-store,́max-age=60` would lose its `no-store`, and a `Vary` name
/// could hide the same way. An ASCII byte never occurs inside a multi-byte UTF-8 sequence, so
/// every piece cut at one is valid text.
package enum FieldText {
    /// `text` split at every byte `separator` (an ASCII character), empty pieces kept unless
    /// `omittingEmpty`.
    package static func split(
        _ text: some StringProtocol, at separator: Unicode.Scalar, maxSplits: Int = .max, omittingEmpty: Bool = false
    ) -> [String] {
        text.utf8.split(separator: UInt8(ascii: separator), maxSplits: maxSplits, omittingEmptySubsequences: omittingEmpty)
            .map { String(decoding: $0, as: UTF8.self) }
    }

    /// `text` without the spaces and horizontal tabs at either end (optional white space, RFC 9110
    /// §5.6.3): no other white space, Unicode's no-break spaces included, is removed.
    package static func trimmed(_ text: some StringProtocol) -> String {
        let isBlank = { (byte: UInt8) in byte == 0x20 || byte == 0x09 }
        let bytes = Array(text.utf8)
        guard let first = bytes.firstIndex(where: { !isBlank($0) }), let last = bytes.lastIndex(where: { !isBlank($0) }) else {
            return ""
        }
        return String(decoding: bytes[first...last], as: UTF8.self)
    }

    /// `text` with its ASCII letters in lower case and every other character as it is (field
    /// names and tokens are case-insensitive only in ASCII: the Kelvin sign is not a `k`).
    package static func lowercased(_ text: some StringProtocol) -> String {
        String(decoding: text.utf8.map { (0x41...0x5A).contains($0) ? $0 | 0x20 : $0 }, as: UTF8.self)
    }

    /// The parameters of a field value such as a media type (`text/plain; charset="utf-8"`): each
    /// `name=value` after the first `;`, the name as a token, a quoted value unquoted (RFC 9110
    /// §5.6.6, §5.6.4). A value is a quoted string only when it starts with a quote: a `;` inside
    /// one is part of the value, not a new parameter; a stray quote inside a token is a byte of it.
    package static func parameters(_ text: some StringProtocol) -> [(name: String, value: String)] {
        let bytes = Array(text.utf8)
        var result: [(name: String, value: String)] = []
        let semicolon = UInt8(ascii: ";")
        let quote = UInt8(ascii: "\"")
        let backslash = UInt8(ascii: "\\")
        // Past the first `;` (the media type itself holds no quoted string).
        guard var index = bytes.firstIndex(of: semicolon) else { return [] }
        index += 1
        while index < bytes.count {
            // The name, up to `=` or the next `;`.
            let nameStart = index
            while index < bytes.count, bytes[index] != UInt8(ascii: "="), bytes[index] != semicolon { index += 1 }
            let name = Self.token(String(decoding: bytes[nameStart..<index], as: UTF8.self))
            guard index < bytes.count, bytes[index] == UInt8(ascii: "=") else {
                index += 1
                continue
            }
            index += 1
            while index < bytes.count, bytes[index] == 0x20 || bytes[index] == 0x09 { index += 1 }
            var value: [UInt8] = []
            if index < bytes.count, bytes[index] == quote {
                // A quoted string, to its closing quote (escapes taken as the byte they escape).
                index += 1
                while index < bytes.count, bytes[index] != quote {
                    if bytes[index] == backslash, index + 1 < bytes.count { index += 1 }
                    value.append(bytes[index])
                    index += 1
                }
                // A quoted string without its closing quote is no value (RFC 9110 §5.6.4): the
                // parameter, and what follows in it, are dropped.
                guard index < bytes.count else { break }
                // Past the closing quote, and whatever stands before the next `;`.
                while index < bytes.count, bytes[index] != semicolon { index += 1 }
                result.append((name, String(decoding: value, as: UTF8.self)))
            } else {
                let valueStart = index
                while index < bytes.count, bytes[index] != semicolon { index += 1 }
                result.append((name, Self.trimmed(String(decoding: bytes[valueStart..<index], as: UTF8.self))))
            }
            index += 1
        }
        return result
    }

    /// A list member as compared: trimmed of optional white space and lower-cased in ASCII.
    package static func token(_ text: some StringProtocol) -> String {
        self.lowercased(self.trimmed(text))
    }
}
