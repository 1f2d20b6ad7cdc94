import Foundation

/// Any JSON value, for callers who want untyped JSON.
///
/// Numbers are kept as written where `Decimal` can hold them (up to 38 significant digits, and
/// magnitudes up to about 10^165): integers that fit in `Int` as `.integer`, other numbers as
/// `.number` when a `Double` holds them as written, else as `.decimal` (more significant digits
/// than a `Double` has, such as an amount of money, or an integer beyond `Int`). Beyond that, a
/// number is the nearest `Double`. Wire protocols hand a call's result on through this type.
///
/// Decoding refuses JSON nested more than 64 levels deep (counted from the outermost value
/// decoded, so an envelope's or a JSON-RPC answer's own levels count), with a `DecodingError`
/// (kind `decoding` from a request): each level is a call of its own, and a hostile answer nested
/// a few hundred levels deep would otherwise overflow the stack of the thread decoding it.
public enum JSONValue: Sendable, Hashable, Codable {
    /// `null`.
    case null
    /// `true` or `false`.
    case bool(Bool)
    /// A number without a fraction or exponent that fits in `Int`.
    case integer(Int)
    /// A number a `Double` holds as written.
    case number(Double)
    /// A number a `Double` would round (`0.1234567890123456789`, `12345678901234567891`), kept exactly.
    case decimal(Decimal)
    /// A string.
    case string(String)
    /// An array.
    case array([JSONValue])
    /// An object.
    case object([String: JSONValue])

    /// Decodes any JSON value.
    public init(from decoder: any Decoder) throws {
        guard decoder.codingPath.count < Self.maxDepth else {
            throw DecodingError.dataCorrupted(
                .init(codingPath: decoder.codingPath, debugDescription: "JSON nested more than \(Self.maxDepth) levels deep"))
        }
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Int.self) {
            self = .integer(value)
        } else if let exact = try? container.decode(Decimal.self) {
            // A `Double` when it says the same number (it prints the shortest text that reads
            // back as itself); the exact value when it would round.
            if let value = try? container.decode(Double.self), Decimal(string: "\(value)") == exact {
                self = .number(value)
            } else {
                self = .decimal(exact)
            }
        } else if let value = try? container.decode(Double.self) {
            // Beyond `Decimal`'s range (about 10^165): only a `Double` can hold it.
            self = .number(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([JSONValue].self) {
            self = .array(value)
        } else {
            self = .object(try container.decode([String: JSONValue].self))
        }
    }

    /// The deepest nesting decoded (see the type's documentation).
    static let maxDepth = 64

    /// Encodes the value as JSON.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let value): try container.encode(value)
        case .integer(let value): try container.encode(value)
        case .number(let value): try container.encode(value)
        case .decimal(let value): try container.encode(value)
        case .string(let value): try container.encode(value)
        case .array(let value): try container.encode(value)
        case .object(let value): try container.encode(value)
        }
    }

    /// The same value with every `null` object member and array element removed, at every depth.
    public func droppingNulls() -> JSONValue {
        switch self {
        case .array(let items):
            return .array(items.filter { $0 != .null }.map { $0.droppingNulls() })
        case .object(let members):
            return .object(members.filter { $0.value != .null }.mapValues { $0.droppingNulls() })
        default:
            return self
        }
    }

    /// The member with the given key, for objects.
    public subscript(key: String) -> JSONValue? {
        if case .object(let members) = self { return members[key] }
        return nil
    }

    /// The element at the given index, for arrays.
    public subscript(index: Int) -> JSONValue? {
        if case .array(let items) = self, items.indices.contains(index) { return items[index] }
        return nil
    }

    /// The string, for strings.
    public var stringValue: String? {
        if case .string(let value) = self { return value }
        return nil
    }

    /// The number as an `Int`, for integers.
    public var intValue: Int? {
        switch self {
        case .integer(let value): return value
        case .number(let value) where value.rounded() == value: return Int(exactly: value)
        case .decimal(let value): return Int(value.description)
        case .string(let value): return Int(value)
        default: return nil
        }
    }

    /// The value encoded as JSON bytes.
    public func encoded() throws -> Data {
        try JSONEncoder().encode(self)
    }
}
