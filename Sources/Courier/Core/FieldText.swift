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
    /// §5.6.6, §5.6.4): a `;` inside a quoted string is part of its value, not a new parameter.
    package static func parameters(_ text: some StringProtocol) -> [(name: String, value: String)] {
        var segments: [[UInt8]] = []
        var current: [UInt8] = []
        var quoted = false
        var escaped = false
        for byte in text.utf8 {
            if quoted {
                current.append(byte)
                if escaped {
                    escaped = false
                } else if byte == UInt8(ascii: "\\") {
                    escaped = true
                } else if byte == UInt8(ascii: "\"") {
                    quoted = false
                }
            } else if byte == UInt8(ascii: ";") {
                segments.append(current)
                current = []
            } else {
                if byte == UInt8(ascii: "\"") { quoted = true }
                current.append(byte)
            }
        }
        segments.append(current)
        return segments.dropFirst().compactMap { segment in
            let parts = Self.split(String(decoding: segment, as: UTF8.self), at: "=", maxSplits: 1)
            guard parts.count == 2 else { return nil }
            return (Self.token(parts[0]), Self.unquoted(Self.trimmed(parts[1])))
        }
    }

    /// A quoted string's content without its quotes and escapes (RFC 9110 §5.6.4); any other
    /// text as it is.
    package static func unquoted(_ text: String) -> String {
        let bytes = Array(text.utf8)
        guard bytes.count >= 2, bytes.first == UInt8(ascii: "\""), bytes.last == UInt8(ascii: "\"") else { return text }
        var content: [UInt8] = []
        var escaped = false
        for byte in bytes.dropFirst().dropLast() {
            if !escaped, byte == UInt8(ascii: "\\") {
                escaped = true
                continue
            }
            escaped = false
            content.append(byte)
        }
        return String(decoding: content, as: UTF8.self)
    }

    /// A list member as compared: trimmed of optional white space and lower-cased in ASCII.
    package static func token(_ text: some StringProtocol) -> String {
        self.lowercased(self.trimmed(text))
    }
}
