import Foundation
import HTTPTypes

/// A ``ResponseDecoding`` without its value type.
struct ErasedDecoding: Sendable {
    /// Whether the body is read at all.
    let readsBody: Bool
    /// Decodes, reusing a value decoded earlier from the same cached body when given a key.
    let run:
        @Sendable (_ body: Data, _ head: HTTPResponse, _ decoder: JSONDecoder, _ reuse: (key: String, values: DecodedValues)?) throws ->
            any Sendable

    /// For exchanges whose body the caller reads itself (streams, downloads): nothing to decode.
    static let streamed = ErasedDecoding(readsBody: false) { _, _, _, _ in () }

    init(
        readsBody: Bool,
        run: @escaping @Sendable (Data, HTTPResponse, JSONDecoder, (key: String, values: DecodedValues)?) throws -> any Sendable
    ) {
        self.readsBody = readsBody
        self.run = run
    }

    init<Value: Sendable>(_ decoding: ResponseDecoding<Value>) {
        self.readsBody = decoding.readsBody
        let deterministic = decoding.isDeterministic
        self.run = { body, head, decoder, reuse in
            let input = ResponseDecodingInput(body: body, head: head, decoder: decoder)
            if let reuse, deterministic {
                return try reuse.values.value(key: reuse.key, body: body) { try decoding.run(input) }
            }
            return try decoding.run(input)
        }
    }
}

/// Type names for the "decoded" event, worked out once per type (the runtime's name lookup is
/// slow enough to matter on every request).
enum TypeNames {
    private static let names = Locked<[ObjectIdentifier: String]>([:])

    static func name(of type: any Any.Type) -> String {
        let key = ObjectIdentifier(type)
        if let name = Self.names.withLock({ $0[key] }) { return name }
        let name = String(describing: type)
        Self.names.withLock { $0[key] = name }
        return name
    }
}
