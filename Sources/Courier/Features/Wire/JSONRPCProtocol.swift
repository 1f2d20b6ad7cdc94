import Foundation
import HTTPTypes

/// JSON-RPC 2.0 over HTTP POST.
///
/// The endpoint's JSON body becomes `params` (an object: by name; an array: by position), its
/// `operation` the `method`. The response's `result` is what gets decoded; an `error` object
/// throws ``CourierError`` of kind `rpc` with the code, message and data. A notification carries no
/// `id` and expects no result.
///
/// ```swift
/// enum MathAPI {
///     static func sum(_ numbers: [Int]) -> Endpoint<Int> {
///         .rpc("sum", params: numbers, service: "math")
///     }
/// }
/// ```
public struct JSONRPCProtocol: WireProtocol {
    /// Creates the protocol.
    public init() {}

    /// Wraps the body (the params) in a JSON-RPC request object.
    public func box(_ request: inout Request, call: WireCall) throws {
        var envelope: [String: JSONValue] = ["jsonrpc": .string("2.0"), "method": .string(call.operation)]
        if let body = request.body {
            guard let bytes = body.bytes else {
                throw CourierError.invalidRequest("JSON-RPC params must be a body held in memory, not a stream")
            }
            guard !bytes.isEmpty else { return try self.boxed(&request, envelope: envelope, call: call) }
            let params = try JSONDecoder().decode(JSONValue.self, from: bytes)
            switch params {
            case .object, .array: envelope["params"] = params
            default: throw CourierError.invalidRequest("JSON-RPC params must be an object or an array")
            }
        }
        try self.boxed(&request, envelope: envelope, call: call)
    }

    private func boxed(_ request: inout Request, envelope: [String: JSONValue], call: WireCall) throws {
        var envelope = envelope
        if !call.isNotification { envelope["id"] = .integer(call.id) }
        request.body = .data(try JSONValue.object(envelope).encoded(), contentType: "application/json")
        request.head.method = .post
        request.head.headerFields[.contentType] = "application/json"
    }

    /// Returns `result`, or throws the `error` object.
    public func unbox(_ body: Data, head: HTTPResponse, call: WireCall) throws -> Data {
        if call.isNotification {
            // §4.1: the server must not reply to a notification. A reply that is an error object
            // (§5: with a null id, the request could not be parsed or was invalid) says the
            // notification was refused; anything else is ignored, as no reply is expected.
            if let refusal = JSONRPCResponse.refusal(in: body) { throw refusal }
            return Data("null".utf8)
        }
        let response: JSONRPCResponse
        do {
            response = try JSONDecoder().decode(JSONRPCResponse.self, from: body)
        } catch {
            throw CourierError.decoding(
                type: JSONRPCResponse.self, codingPath: nil, reason: "not a JSON-RPC 2.0 response", body: body, underlying: error)
        }
        return try response.payload(expecting: call.id, body: body)
    }
}

extension WireProtocol where Self == JSONRPCProtocol {
    /// JSON-RPC 2.0.
    public static var jsonRPC: JSONRPCProtocol { JSONRPCProtocol() }
}

/// One JSON-RPC 2.0 response object.
struct JSONRPCResponse: Decodable, Sendable {
    /// JSON-RPC 2.0 §5.1's error object, read leniently: a careless server's code written as
    /// text (`"-32601"`) or as an integral number with a fraction (`-32601.0`), or a message left
    /// out, still makes a refusal (kind `rpc`), never an unreadable answer. A code that is no
    /// integer at all fails it.
    struct ErrorObject: Decodable, Sendable {
        var code: Int
        var message: String
        var data: JSONValue?

        private enum CodingKeys: String, CodingKey { case code, message, data }

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            guard let code = Self.integer(try container.decode(JSONValue.self, forKey: .code)) else {
                throw DecodingError.dataCorrupted(
                    .init(codingPath: [CodingKeys.code], debugDescription: "the error code is not an integer"))
            }
            self.code = code
            self.message = (try? container.decodeIfPresent(String.self, forKey: .message)) ?? ""
            self.data = try container.decodeIfPresent(JSONValue.self, forKey: .data)
        }

        static func integer(_ value: JSONValue) -> Int? {
            switch value {
            case .integer(let number): return number
            case .number(let number): return Int(exactly: number)
            case .string(let text): return Int(text.trimmingCharacters(in: .whitespaces))
            default: return nil
            }
        }
    }

    var jsonrpc: String?
    var result: JSONValue?
    var error: ErrorObject?
    var id: JSONValue?

    private enum CodingKeys: String, CodingKey { case jsonrpc, result, error, id }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.jsonrpc = try container.decodeIfPresent(String.self, forKey: .jsonrpc)
        // `result` may legitimately be null: keep "present and null" apart from "absent".
        self.result = container.contains(.result) ? (try container.decode(JSONValue.self, forKey: .result)) : nil
        self.error = try container.decodeIfPresent(ErrorObject.self, forKey: .error)
        self.id = try container.decodeIfPresent(JSONValue.self, forKey: .id)
        guard self.jsonrpc == "2.0" else {
            throw DecodingError.dataCorrupted(.init(codingPath: [CodingKeys.jsonrpc], debugDescription: "expected \"jsonrpc\": \"2.0\""))
        }
    }

    /// The result's bytes, or the error the response carries.
    ///
    /// JSON-RPC 2.0 §5: `id` is required and must be the request's; it is `null` only on an error
    /// about a request whose id could not be read. So an answer with a result must carry this
    /// request's id (the number, not a string of it), and an error with another id than this
    /// request's or `null` is an answer to another call.
    func payload(expecting id: Int?, body: Data) throws -> Data {
        // §5: "Either the result member or error member MUST be included, but both members MUST
        // NOT be included": an answer with both is no answer to trust either way. (A null
        // result beside an error is JSON-RPC 1.0's shape of an error: the error counts.)
        if self.error != nil, let result = self.result, result != .null {
            throw CourierError.decoding(
                type: JSONRPCResponse.self, codingPath: "result", reason: "the response has both a result and an error", body: body,
                underlying: nil)
        }
        if let error = self.error {
            if let id, let received = self.id, received != .null, !Self.matches(received, id) {
                throw Self.mismatch(id, body: body)
            }
            throw CourierError.rpc(code: error.code, message: error.message, data: error.data)
        }
        if let id, !Self.matches(self.id, id) {
            throw Self.mismatch(id, body: body)
        }
        guard let result = self.result else {
            throw CourierError.decoding(
                type: JSONRPCResponse.self, codingPath: "result", reason: "the response has neither result nor error", body: body,
                underlying: nil)
        }
        return try result.encoded()
    }

    /// Whether a response's id is the request's number `id`.
    private static func matches(_ received: JSONValue?, _ id: Int) -> Bool {
        Self.number(received) == id
    }

    /// The response's id as the integer Courier's requests use (`7.0` is the number 7; `"7"` is
    /// a string, not this number); `nil` for anything else.
    var numericID: Int? { Self.number(self.id) }

    /// The refusal a reply to notifications carries (§4.1: none is expected; §5: an error
    /// object says they were refused), or `nil` when it carries none. The reply may be one object
    /// or an array of them (§6); the first with an error member counts (but `false`, `null` or
    /// empty text, which say there was none): a JSON-RPC error object as kind `rpc` with its
    /// code, and another (no integer code, a number, text) as a refusal all the same, kind `rpc`
    /// without a code.
    static func refusal(in body: Data) -> CourierError? {
        guard let root = try? JSONDecoder().decode(JSONValue.self, from: body) else { return nil }
        let objects: [JSONValue]
        switch root {
        case .array(let items): objects = items
        default: objects = [root]
        }
        for object in objects {
            // Any error member but one that says there was none: `"error": false`, `null` or
            // empty text beside a result is a server's way of saying so.
            guard case .object(let members) = object, let error = members["error"] else { continue }
            switch error {
            case .null, .bool(false): continue
            case .string(let text) where text.trimmingCharacters(in: .whitespaces).isEmpty: continue
            default: break
            }
            if let encoded = try? object.encoded(), let response = try? JSONDecoder().decode(JSONRPCResponse.self, from: encoded),
                let error = response.error
            {
                return CourierError.rpc(code: error.code, message: error.message, data: error.data)
            }
            var message = "the server refused the notification with an error that is not a JSON-RPC 2.0 error object"
            if case .object(let fields) = error, case .string(let text)? = fields["message"], !text.isEmpty { message = text }
            var refusal = CourierError(.rpc, message)
            if case .object(let fields) = error { refusal.rpcData = fields["data"] }
            return refusal
        }
        return nil
    }

    /// The id of a batch response item that is not a well-formed response object, when it has
    /// one that names a call (an integer).
    static func numericID(ofMalformed item: JSONValue) -> Int? {
        guard case .object(let members) = item else { return nil }
        return Self.number(members["id"])
    }

    private static func number(_ id: JSONValue?) -> Int? {
        switch id {
        case .integer(let value)?: return value
        case .number(let value)?: return Int(exactly: value)
        case .decimal(let value)?: return Int(value.description)
        default: return nil
        }
    }

    private static func mismatch(_ id: Int, body: Data) -> CourierError {
        CourierError.decoding(
            type: JSONRPCResponse.self, codingPath: "id", reason: "the response id is missing or does not match the request id \(id)",
            body: body, underlying: nil)
    }
}
