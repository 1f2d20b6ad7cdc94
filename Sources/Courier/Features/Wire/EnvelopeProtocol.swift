import Foundation
import HTTPTypes

/// A `{"code": 0, "msg": "…", "data": …}` envelope: `data` is decoded when the code means success;
/// any other code throws ``CourierError`` of kind `business` with the server's message kept for
/// display, and may raise a named event (such as "session expired → sign in again").
///
/// ```swift
/// let envelope = EnvelopeProtocol(successCodes: [0], events: [1001: "sessionExpired"])
/// ```
public struct EnvelopeProtocol: WireProtocol {
    /// The key of the status code.
    public var codeKey: String
    /// The key of the human-readable message.
    public var messageKey: String
    /// The key of the payload.
    public var dataKey: String
    /// The codes that mean success (numbers or strings, compared as text).
    public var successCodes: Set<String>
    /// Codes that raise a named event through the client's event handler.
    public var events: [String: String]

    /// Creates an envelope protocol; codes may be numbers or strings.
    public init(
        codeKey: String = "code",
        messageKey: String = "msg",
        dataKey: String = "data",
        successCodes: [any CustomStringConvertible & Sendable] = [0],
        events: [Int: String] = [:]
    ) {
        self.codeKey = codeKey
        self.messageKey = messageKey
        self.dataKey = dataKey
        self.successCodes = Set(successCodes.map(\.description))
        self.events = Dictionary(uniqueKeysWithValues: events.map { ("\($0.key)", $0.value) })
    }

    /// The keys, the success codes and the events: what decides how an answer is unboxed. The
    /// type's name alone for the default settings.
    public var wireIdentity: String {
        if self.codeKey == "code", self.messageKey == "msg", self.dataKey == "data", self.successCodes == ["0"], self.events.isEmpty {
            return "EnvelopeProtocol"
        }
        func text(_ value: String) -> String { "\(value.utf8.count):\(value)" }
        let codes = self.successCodes.sorted().map(text).joined(separator: ",")
        let events = self.events.sorted { $0.key < $1.key }.map { text($0.key) + "=" + text($0.value) }.joined(separator: ",")
        return "EnvelopeProtocol(\(text(self.codeKey)),\(text(self.messageKey)),\(text(self.dataKey)),[\(codes)],[\(events)])"
    }

    /// Leaves the request as it is.
    public func box(_ request: inout Request, call: WireCall) throws {}

    /// Returns `data` for a success code, or throws the business error.
    public func unbox(_ body: Data, head: HTTPResponse, call: WireCall) throws -> Data {
        // No content is no envelope: nothing to unbox (what the endpoint decodes from nothing
        // decides, as for REST). A 204 or 205 never has content (RFC 9110 §15.3.5, §15.3.6); a
        // 202 (§15.3.3), or any other success, may come without.
        if body.isEmpty { return body }
        let root: JSONValue
        do {
            root = try JSONDecoder().decode(JSONValue.self, from: body)
        } catch {
            throw CourierError.decoding(
                type: JSONValue.self, codingPath: nil, reason: "the envelope is not JSON", body: body, underlying: error)
        }
        guard case .object(let members) = root, let codeValue = members[self.codeKey] else {
            throw CourierError.decoding(
                type: JSONValue.self, codingPath: self.codeKey, reason: "the envelope has no '\(self.codeKey)'", body: body, underlying: nil
            )
        }
        let code: String
        switch codeValue {
        case .integer(let value): code = "\(value)"
        case .number(let value): code = Self.codeText(value)
        case .decimal(let value): code = value.description
        case .string(let value): code = value
        default:
            throw CourierError.decoding(
                type: JSONValue.self, codingPath: self.codeKey, reason: "the code is not a number or a string", body: body, underlying: nil)
        }
        guard self.successCodes.contains(code) else {
            let message = members[self.messageKey]?.stringValue ?? ""
            var error = CourierError.business(code: code, message: message)
            error.event = self.events[code]
            error.body = body
            throw error
        }
        return try (members[self.dataKey] ?? .null).encoded()
    }
}

extension EnvelopeProtocol {
    /// A numeric code as text: integers as their digits (`1e20` is `100000000000000000000`, never a
    /// conversion that traps), other numbers as Swift prints them.
    static func codeText(_ value: Double) -> String {
        if let integer = Int(exactly: value) { return "\(integer)" }
        if value.isFinite, value.rounded() == value { return String(format: "%.0f", value) }
        return "\(value)"
    }
}

extension WireProtocol where Self == EnvelopeProtocol {
    /// A code/msg/data envelope with the default keys and success code 0.
    public static var envelope: EnvelopeProtocol { EnvelopeProtocol() }
}
