import Foundation
import HTTPTypes

/// The value of a field a response varies on, in the form the cache compares (RFC 9111 §4.1:
/// values may be normalised "in a manner consistent with the field's own specification").
///
/// Every field: the values of its field lines are joined with commas and the white space around
/// each list member is dropped. The content-negotiation fields, whose members are a token, media
/// type or language range with parameters and an optional weight (RFC 9110 §12.5), are read
/// member by member: empty members are dropped (§5.6.1), white space around `;` and `=` too,
/// parameter names and the weight's `q` are compared in lower case, and a weight is compared as
/// the number it is (`q=1.0` is `q=1`, which is no weight at all, §12.4.2). Then:
///
/// | field | letter case of values | member order |
/// |---|---|---|
/// | `Accept-Encoding` | ignored (codings, §8.4.1) | ignored: preference is by weight only |
/// | `Accept-Charset` | ignored (charsets, §8.3.2) | ignored: preference is by weight only |
/// | `Accept-Language` | ignored (language ranges, RFC 4647 §2) | kept: servers use it to break ties |
/// | `Accept` | ignored in type, subtype and parameter names (§8.3.1); parameter values kept | kept: servers use it to break ties |
///
/// Any other field is split at commas and compared with the white space (spaces and tabs) around
/// each piece dropped — as if it were a list, whether or not it is one. A value with a quoted
/// string (RFC 9110 §5.6.4), in any field, is compared as written: a comma, semicolon or letter
/// inside the quotes is part of a parameter's value. Letter case is folded for ASCII letters only.
package enum VaryValues {
    /// The value of `name` in `fields` as the cache compares it; `nil` when the field is absent.
    package static func value(of name: String, in fields: HTTPFields) -> String? {
        guard let fieldName = HTTPField.Name(name) else { return nil }
        let values = fields[values: fieldName]
        guard !values.isEmpty else { return nil }
        if values.contains(where: { $0.utf8.contains(UInt8(ascii: "\"")) }) {
            return values.map { FieldText.trimmed($0) }.joined(separator: ",")
        }
        let members = values.flatMap { FieldText.split($0, at: ",") }
        switch name {
        case "accept-encoding", "accept-charset":
            return self.negotiation(members, lowercasingValues: true).sorted().joined(separator: ",")
        case "accept-language":
            return self.negotiation(members, lowercasingValues: true).joined(separator: ",")
        case "accept":
            return self.negotiation(members, lowercasingValues: false).joined(separator: ",")
        default:
            // Empty members (`a, , b`, a trailing comma, an empty line) are no members (RFC 9110 §5.6.1).
            return values.flatMap { FieldText.split($0, at: ",", omittingEmpty: true).map { FieldText.trimmed($0) } }
                .filter { !$0.isEmpty }.joined(separator: ",")
        }
    }

    /// Each non-empty member as `value;name=value…`, without white space and without a weight of 1.
    /// `lowercasingValues`: the whole member is case-insensitive; otherwise only the media type
    /// and the parameter names are.
    private static func negotiation(_ members: [String], lowercasingValues: Bool) -> [String] {
        members.compactMap { member -> String? in
            let parts = FieldText.split(member, at: ";").map { FieldText.trimmed($0) }
            guard let first = parts.first, !first.isEmpty else { return nil }
            var normalised = FieldText.lowercased(first)
            for parameter in parts.dropFirst() where !parameter.isEmpty {
                let pair = FieldText.split(parameter, at: "=", maxSplits: 1)
                let name = FieldText.token(pair[0])
                var value = pair.count > 1 ? FieldText.trimmed(pair[1]) : ""
                if name == "q" {
                    guard let weight = self.weight(value) else {
                        normalised += ";q=" + value
                        continue
                    }
                    if weight == "1" { continue }
                    value = weight
                } else if lowercasingValues {
                    value = FieldText.lowercased(value)
                }
                normalised += ";" + name + "=" + value
            }
            return normalised
        }
    }

    /// A weight as the number it is (`0.80` → `0.8`, `1.000` → `1`, `0.` → `0`); `nil` when it is
    /// not a qvalue (RFC 9110 §12.4.2: 0 to 1 with at most three decimals).
    package static func weight(_ text: String) -> String? {
        let bytes = Array(text.utf8)
        guard let first = bytes.first, first == UInt8(ascii: "0") || first == UInt8(ascii: "1") else { return nil }
        var decimals: [UInt8] = []
        if bytes.count > 1 {
            guard bytes[1] == UInt8(ascii: "."), bytes.count <= 5 else { return nil }
            decimals = Array(bytes[2...])
            guard decimals.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) else { return nil }
            if first == UInt8(ascii: "1"), !decimals.allSatisfy({ $0 == UInt8(ascii: "0") }) { return nil }
        }
        while decimals.last == UInt8(ascii: "0") { decimals.removeLast() }
        return decimals.isEmpty ? String(UnicodeScalar(first)) : "0." + String(decoding: decimals, as: UTF8.self)
    }
}
