import Foundation

/// The character encodings ``ResponseDecoding/string`` reads a body in: the one its byte order
/// mark names, else the `charset` parameter of its `Content-Type`, else UTF-8.
///
/// As the WHATWG Encoding Standard's "decode" (§6): a byte order mark wins over the label and is
/// not part of the text. Labels are matched without regard to case and quotes (RFC 9110 §8.3.2:
/// "charset" names are case-insensitive); `utf-16` without a byte order mark is little-endian,
/// as that standard says. A charset outside this list is refused by name rather than read as
/// something it is not.
enum TextCharset: Equatable {
    case utf8
    case latin1
    case utf16LittleEndian
    case utf16BigEndian

    /// The charsets this decoding reads, as a refusal names them.
    static let supported = "UTF-8, US-ASCII, ISO-8859-1, UTF-16, UTF-16LE, UTF-16BE"

    /// The charset a `charset` label names, or `nil` for one not supported.
    init?(label: String) {
        switch FieldText.token(label.trimmingCharacters(in: CharacterSet(charactersIn: "\"' \t"))) {
        case "utf-8", "utf8", "unicode-1-1-utf-8", "us-ascii", "ascii": self = .utf8
        case "iso-8859-1", "iso8859-1", "iso_8859-1", "latin1", "l1", "iso-ir-100", "cp819": self = .latin1
        case "utf-16", "utf-16le", "utf16", "utf16le": self = .utf16LittleEndian
        case "utf-16be", "utf16be": self = .utf16BigEndian
        default: return nil
        }
    }

    /// The `charset` parameter of a `Content-Type` value, if it has one.
    static func label(inContentType contentType: String) -> String? {
        for parameter in FieldText.split(contentType, at: ";").dropFirst() {
            let parts = FieldText.split(parameter, at: "=", maxSplits: 1)
            guard parts.count == 2, FieldText.token(FieldText.trimmed(parts[0])) == "charset" else { continue }
            return FieldText.trimmed(parts[1])
        }
        return nil
    }

    /// The text of `body`, or why it has none: the charset is not supported, or the bytes are not
    /// valid in it.
    static func decode(_ body: Data, contentType: String?) -> Result<String, DecodeFailure> {
        body.withUnsafeBytes { raw in Self.decode(raw.assumingMemoryBound(to: UInt8.self), contentType: contentType) }
    }

    private static func decode(_ bytes: UnsafeBufferPointer<UInt8>, contentType: String?) -> Result<String, DecodeFailure> {
        var charset: TextCharset
        var start = 0
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) {
            (charset, start) = (.utf8, 3)
        } else if bytes.starts(with: [0xFE, 0xFF]) {
            (charset, start) = (.utf16BigEndian, 2)
        } else if bytes.starts(with: [0xFF, 0xFE]) {
            (charset, start) = (.utf16LittleEndian, 2)
        } else if let label = contentType.flatMap(Self.label(inContentType:)) {
            guard let named = TextCharset(label: label) else { return .failure(.unsupported(label)) }
            charset = named
        } else {
            charset = .utf8
        }
        let text = UnsafeBufferPointer(rebasing: bytes[start...])
        switch charset {
        case .utf8:
            return String(validating: text, as: UTF8.self).map { .success($0) } ?? .failure(.invalid(charset))
        case .latin1:
            // Every byte is the code point of the same number.
            var result = String.UnicodeScalarView()
            result.append(contentsOf: text.lazy.map { Unicode.Scalar($0) })
            return .success(String(result))
        case .utf16LittleEndian, .utf16BigEndian:
            guard text.count % 2 == 0 else { return .failure(.invalid(charset)) }
            let littleEndian = charset == .utf16LittleEndian
            let units = stride(from: 0, to: text.count, by: 2).lazy.map { index -> UInt16 in
                let first = UInt16(text[index])
                let second = UInt16(text[index + 1])
                return littleEndian ? first | second << 8 : first << 8 | second
            }
            return String(validating: units, as: UTF16.self).map { .success($0) } ?? .failure(.invalid(charset))
        }
    }

    /// Why a body has no text.
    enum DecodeFailure: Error, Equatable {
        case unsupported(String)
        case invalid(TextCharset)

        var reason: String {
            switch self {
            case .unsupported(let label):
                // Server text: printable ASCII only, and not much of it.
                let shown = String(
                    String.UnicodeScalarView(label.unicodeScalars.prefix(40).map { (0x20...0x7E).contains($0.value) ? $0 : "?" }))
                return "the body's charset '\(shown)' is not supported (\(TextCharset.supported))"
            case .invalid(let charset): return "the body is not valid \(charset.name)"
            }
        }
    }

    var name: String {
        switch self {
        case .utf8: "UTF-8"
        case .latin1: "ISO-8859-1"
        case .utf16LittleEndian: "UTF-16LE"
        case .utf16BigEndian: "UTF-16BE"
        }
    }
}
