import Foundation
import HTTPTypes

/// How a response body becomes the value an endpoint returns.
///
/// Built-in decodings: ``json(_:)`` for `Decodable` types, ``data``, ``string``, ``none`` for
/// endpoints without content, and ``reform(_:)`` for a closure that maps the raw response to
/// any type (the "reformer" of the seeds).
public struct ResponseDecoding<Value>: Sendable {
    /// What a decoding sees: the body, the response head and the client's decoder.
    public typealias Input = ResponseDecodingInput

    @usableFromInline let decode: @Sendable (Input) throws -> Value
    /// Whether the body should be read at all (`false` for ``none``).
    @usableFromInline let readsBody: Bool
    /// Whether the same body always decodes to the same value with the same client, so a cached
    /// response's decoded value may be reused (true for ``json(_:)`` with the client's decoder).
    @usableFromInline var isDeterministic = false

    /// Creates a decoding from a closure.
    @inlinable
    public init(readsBody: Bool = true, _ decode: @escaping @Sendable (Input) throws -> Value) {
        self.decode = decode
        self.readsBody = readsBody
    }

    /// A decoding that maps the raw response to any value (a "reformer").
    ///
    /// Errors thrown by `transform` become ``CourierError`` of kind `decoding`.
    public static func reform(_ transform: @escaping @Sendable (_ body: Data, _ head: HTTPResponse) throws -> Value) -> ResponseDecoding {
        ResponseDecoding { input in try transform(input.body, input.head) }
    }
}

/// What a response decoding sees: the body, the response head and the client's decoder
/// (``ResponseDecoding/Input``).
///
/// A type of its own rather than one nested in the generic ``ResponseDecoding``: a nested type
/// would be generic too, and making one where the value type is not known at compile time costs
/// a lookup of its type metadata on every response.
public struct ResponseDecodingInput: Sendable {
    /// The response body.
    public var body: Data
    /// The response status and header fields.
    public var head: HTTPResponse
    /// The client's JSON decoder.
    public var decoder: JSONDecoder
}

extension ResponseDecoding where Value: Decodable & SendableMetatype {
    /// JSON decoding with the given decoder, or the client's when `nil`.
    ///
    /// A response whose `Content-Type` is present and is not JSON fails with a decoding error that
    /// names the content type, instead of a confusing parse error.
    @inlinable
    public static func json(_ decoder: JSONDecoder? = nil) -> ResponseDecoding {
        // Inlinable, so the decoding is specialised for `Value` where the endpoint is declared.
        var decoding = ResponseDecoding { input in
            try checkJSONContentType(input.head, body: input.body, type: Value.self)
            return try (decoder ?? input.decoder).decode(Value.self, from: input.body)
        }
        decoding.isDeterministic = decoder == nil
        return decoding
    }
}

/// Fails with a decoding error when the response says it is not JSON.
@usableFromInline
func checkJSONContentType(_ head: HTTPResponse, body: Data, type: Any.Type) throws {
    if let contentType = head.headerFields.combinedValue(.contentType), !isJSONContentType(contentType) {
        throw CourierError.decoding(
            type: type, codingPath: nil,
            reason: "expected a JSON response, got Content-Type \(contentType)",
            body: body, underlying: nil
        )
    }
}

func isJSONContentType(_ contentType: String) -> Bool {
    if contentType == "application/json" || contentType == "application/json; charset=utf-8" { return true }
    let mediaType = FieldText.token(FieldText.split(contentType, at: ";", maxSplits: 1)[0])
    return mediaType == "application/json" || mediaType.hasSuffix("+json") || mediaType == "text/json"
}

extension ResponseDecoding where Value == Data {
    /// The raw body bytes.
    public static var data: ResponseDecoding { ResponseDecoding { $0.body } }
}

extension ResponseDecoding where Value == String {
    /// The body as text, in the charset its byte order mark or its `Content-Type` names (UTF-8
    /// when neither does); the byte order mark is not part of the text.
    ///
    /// UTF-8 (US-ASCII read as UTF-8), ISO-8859-1 and windows-1252 (read as windows-1252, as
    /// browsers do) and UTF-16 are read. Another charset is read as UTF-8 when the bytes are
    /// UTF-8; bytes that are not valid in the charset are a decoding error that names it.
    public static var string: ResponseDecoding {
        ResponseDecoding { input in
            switch TextCharset.decode(input.body, contentType: input.head.headerFields.combinedValue(.contentType)) {
            case .success(let text):
                return text
            case .failure(let failure):
                throw CourierError.decoding(type: String.self, codingPath: nil, reason: failure.reason, body: input.body, underlying: nil)
            }
        }
    }
}

extension ResponseDecoding where Value == Void {
    /// No content: the body is not read into memory and nothing is decoded.
    public static var none: ResponseDecoding { ResponseDecoding(readsBody: false) { _ in () } }
}

extension ResponseDecoding {
    /// Runs the decoding and turns any failure into a ``CourierError`` of kind `decoding`.
    func run(_ input: Input) throws -> Value {
        do {
            return try self.decode(input)
        } catch let error as CourierError {
            throw error
        } catch let error as DecodingError {
            throw CourierError.decoding(
                type: Value.self, codingPath: error.courierCodingPath, reason: error.courierReason,
                body: input.body, underlying: error
            )
        } catch {
            throw CourierError.decoding(
                type: Value.self, codingPath: nil, reason: String(describing: error), body: input.body, underlying: error)
        }
    }
}

extension DecodingError {
    var courierCodingPath: String {
        let path: [any CodingKey]
        switch self {
        case .typeMismatch(_, let context), .valueNotFound(_, let context), .dataCorrupted(let context):
            path = context.codingPath
        case .keyNotFound(let key, let context):
            path = context.codingPath + [key]
        @unknown default:
            path = []
        }
        var text = ""
        for key in path {
            if let index = key.intValue {
                text += "[\(index)]"
            } else {
                text += text.isEmpty ? key.stringValue : ".\(key.stringValue)"
            }
        }
        return text
    }

    var courierReason: String {
        switch self {
        case .typeMismatch(let type, let context): return "expected \(type): \(context.debugDescription)"
        case .valueNotFound(let type, _): return "expected \(type), found null"
        case .keyNotFound(let key, _): return "missing key '\(key.stringValue)'"
        case .dataCorrupted(let context): return "malformed data: \(context.debugDescription)"
        @unknown default: return String(describing: self)
        }
    }
}
