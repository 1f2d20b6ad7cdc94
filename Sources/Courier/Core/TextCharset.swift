import Foundation

/// The character encodings ``ResponseDecoding/string`` reads a body in: the one its byte order
/// mark names, else the `charset` parameter of its `Content-Type`, else UTF-8.
///
/// As the WHATWG Encoding Standard's "decode" (§6): a byte order mark wins over the label and is
/// not part of the text; the labels of ISO-8859-1 name windows-1252, as browsers read them; `utf-16`
/// without a byte order mark is little-endian. Labels are matched without regard to case and quotes
/// (RFC 9110 §8.3.2). A label outside this list (or an empty one) is read as UTF-8 when the bytes
/// are UTF-8 (an ASCII body labelled `iso-8859-15` is the same text), and refused by name when
/// they are not, rather than read as something they are not.
enum TextCharset: Equatable {
    case utf8
    case windows1252
    case utf16LittleEndian
    case utf16BigEndian

    /// The charsets this decoding reads, as a refusal names them.
    static let supported = "UTF-8, US-ASCII, ISO-8859-1, windows-1252, UTF-16, UTF-16LE, UTF-16BE"

    /// The charset a `charset` label names, or `nil` for one not supported.
    init?(label: String) {
        switch FieldText.token(label.trimmingCharacters(in: CharacterSet(charactersIn: "\"' \t"))) {
        case "utf-8", "utf8", "unicode-1-1-utf-8", "us-ascii", "ascii": self = .utf8
        case "iso-8859-1", "iso8859-1", "iso_8859-1", "latin1", "l1", "iso-ir-100", "cp819", "windows-1252", "cp1252", "x-cp1252":
            self = .windows1252
        case "utf-16", "utf-16le", "utf16", "utf16le": self = .utf16LittleEndian
        case "utf-16be", "utf16be": self = .utf16BigEndian
        default: return nil
        }
    }

    /// The `charset` parameter of a `Content-Type` value, if it has one (a `charset=` inside
    /// another parameter's quoted value is not it).
    static func label(inContentType contentType: String) -> String? {
        FieldText.parameters(contentType).first { $0.name == "charset" }?.value
    }

    /// The text of `body`, or why it has none: the charset is not supported, or the bytes are not
    /// valid in it.
    static func decode(_ body: Data, contentType: String?) -> Result<String, DecodeFailure> {
        body.withUnsafeBytes { raw in Self.decode(raw.assumingMemoryBound(to: UInt8.self), contentType: contentType) }
    }

    private static func decode(_ bytes: UnsafeBufferPointer<UInt8>, contentType: String?) -> Result<String, DecodeFailure> {
        var charset: TextCharset
        var start = 0
        var unknownLabel: String?
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) {
            (charset, start) = (.utf8, 3)
        } else if bytes.starts(with: [0xFE, 0xFF]) {
            (charset, start) = (.utf16BigEndian, 2)
        } else if bytes.starts(with: [0xFF, 0xFE]) {
            (charset, start) = (.utf16LittleEndian, 2)
        } else if let label = contentType.flatMap(Self.label(inContentType:)) {
            if let named = TextCharset(label: label) {
                charset = named
            } else {
                (charset, unknownLabel) = (.utf8, label)
            }
        } else {
            charset = .utf8
        }
        let text = UnsafeBufferPointer(rebasing: bytes[start...])
        switch charset {
        case .utf8:
            // Validated with `transcode`, available on every platform Courier builds for
            // (`String(validating:as:)` is not on the older Apple systems).
            guard Self.isValid(text, as: UTF8.self) else {
                return .failure(unknownLabel.map(DecodeFailure.unsupported) ?? .invalid(charset))
            }
            return .success(String(decoding: text, as: UTF8.self))
        case .windows1252:
            var result = String.UnicodeScalarView()
            result.append(contentsOf: text.lazy.map(Self.windows1252))
            return .success(String(result))
        case .utf16LittleEndian, .utf16BigEndian:
            guard text.count % 2 == 0 else { return .failure(.invalid(charset)) }
            let littleEndian = charset == .utf16LittleEndian
            let units = stride(from: 0, to: text.count, by: 2).map { index -> UInt16 in
                let first = UInt16(text[index])
                let second = UInt16(text[index + 1])
                return littleEndian ? first | second << 8 : first << 8 | second
            }
            guard Self.isValid(units, as: UTF16.self) else { return .failure(.invalid(charset)) }
            return .success(String(decoding: units, as: UTF16.self))
        }
    }

    /// Whether `units` are valid in `encoding` (no unpaired surrogate, no malformed sequence).
    private static func isValid<Units: Sequence, Encoding: Unicode.Encoding>(_ units: Units, as encoding: Encoding.Type) -> Bool
    where Units.Element == Encoding.CodeUnit {
        !transcode(units.makeIterator(), from: encoding, to: UTF32.self, stoppingOnError: true, into: { _ in })
    }

    /// The character a windows-1252 byte stands for (WHATWG's index: 0x80–0x9F hold typographic
    /// characters, the five it leaves out stand for themselves; every other byte is its code point).
    private static func windows1252(_ byte: UInt8) -> Unicode.Scalar {
        guard (0x80...0x9F).contains(byte) else { return Unicode.Scalar(byte) }
        return Unicode.Scalar(Self.windows1252High[Int(byte) - 0x80]) ?? Unicode.Scalar(byte)
    }

    /// What windows-1252's bytes 0x80–0x9F stand for (made once, not for every byte).
    private static let windows1252High: [UInt32] = [
        0x20AC, 0x81, 0x201A, 0x0192, 0x201E, 0x2026, 0x2020, 0x2021, 0x02C6, 0x2030, 0x0160, 0x2039, 0x0152, 0x8D, 0x017D, 0x8F,
        0x90, 0x2018, 0x2019, 0x201C, 0x201D, 0x2022, 0x2013, 0x2014, 0x02DC, 0x2122, 0x0161, 0x203A, 0x0153, 0x9D, 0x017E, 0x0178,
    ]

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
        case .windows1252: "windows-1252"
        case .utf16LittleEndian: "UTF-16LE"
        case .utf16BigEndian: "UTF-16BE"
        }
    }
}
