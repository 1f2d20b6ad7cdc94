import Crypto
import Foundation
import HTTPTypes

/// A wire protocol that encrypts selected fields of JSON bodies with AES-GCM before sending and
/// decrypts them on receipt, around another protocol (REST by default).
///
/// ```swift
/// let sealed = FieldEncryptionProtocol(fields: ["card", "cvv"], key: SymmetricKey(data: appKey))
/// let pay = Endpoint<Receipt>(method: .post, path: "/pay", body: .json(order)).wire(sealed)
/// ```
///
/// Each listed top-level field of the request's JSON object becomes a base64 string of the
/// AES-GCM box (nonce, ciphertext, tag) of its JSON value, sealed with the field's name as
/// authenticated data, so a value moved to another field fails too. The same fields of the
/// response's JSON object are opened after the inner protocol has unboxed it. A field that fails
/// to open (tampered, another key, not base64) fails the call with kind `decoding` and code
/// `fieldIntegrity`; nothing is delivered. A request body that is not a JSON object fails with
/// `invalidRequest` before anything is sent; a response that is a JSON object this protocol
/// cannot read (its fields could not be checked) fails with code `fieldIntegrity` too.
/// Fields not present are left alone. Responses are
/// never stored by the response cache (their payload holds the decrypted fields).
public struct FieldEncryptionProtocol: WireProtocol {
    /// The names of the top-level fields sealed.
    public let fields: Set<String>
    private let key: SymmetricKey
    private let inner: any WireProtocol

    /// Creates the protocol; the key is 128, 192 or 256 bits (AES-GCM). A key of another size
    /// fails every call with kind `invalidRequest` before anything is sent (a mistake in the
    /// app's set-up, never reported as a field that failed its integrity check).
    public init(fields: Set<String>, key: SymmetricKey, inner: any WireProtocol = RESTProtocol()) {
        self.fields = fields
        self.key = key
        self.inner = inner
    }

    /// The type's name, and the inner protocol's identity when it is not REST. Neither the key
    /// nor the fields: fixtures recorded under one key replay under another, and one service
    /// has one set of sealed fields.
    public var wireIdentity: String {
        self.inner is RESTProtocol ? "FieldEncryptionProtocol" : "FieldEncryptionProtocol(\(self.inner.wireIdentity))"
    }

    /// Seals the listed fields of the JSON body, then lets the inner protocol box the request.
    public func box(_ request: inout Request, call: WireCall) throws {
        guard [128, 192, 256].contains(self.key.bitCount) else {
            throw CourierError.invalidRequest("the field encryption key has \(self.key.bitCount) bits; AES-GCM takes 128, 192 or 256")
        }
        if let body = request.body {
            guard let bytes = body.bytes else {
                throw CourierError.invalidRequest("field encryption needs a body held in memory, not a stream")
            }
            guard var object = (try? JSONSerialization.jsonObject(with: bytes, options: [.fragmentsAllowed])) as? [String: Any] else {
                throw CourierError.invalidRequest("field encryption needs a JSON object body")
            }
            for name in self.fields {
                guard let value = object[name] else { continue }
                let plain = try JSONSerialization.data(withJSONObject: value, options: [.fragmentsAllowed])
                let sealed = try AES.GCM.seal(plain, using: self.key, authenticating: Data(name.utf8))
                guard let combined = sealed.combined else { throw CourierError.invalidRequest("AES-GCM gave no combined box") }
                object[name] = combined.base64EncodedString()
            }
            let encoded = try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])
            request.body = .data(encoded, contentType: body.contentType ?? "application/json")
        }
        try self.inner.box(&request, call: call)
    }

    /// Decrypted payloads never rest in the cache.
    public var payloadMayBeCached: Bool { false }

    /// Lets the inner protocol unbox the response, then opens the listed fields.
    public func unbox(_ body: Data, head: HTTPResponse, call: WireCall) throws -> Data {
        let payload = try self.inner.unbox(body, head: head, call: call)
        let parsed: Any
        do {
            parsed = try JSONSerialization.jsonObject(with: payload, options: [.fragmentsAllowed])
        } catch {
            // What is no JSON object (no content, text, an image) has no fields to open. An
            // object this parser refuses may still be read by the caller's decoder (a number
            // past Double's range, a lone surrogate), with the listed fields in it unchecked:
            // it fails instead.
            // Past a byte order mark too, and whatever a JSON decoder reads as an object.
            let first = payload.first(where: { ![0x20, 0x09, 0x0A, 0x0D, 0xEF, 0xBB, 0xBF, 0xFE, 0xFF, 0x00].contains($0) })
            let readAsObject: Bool
            if case .object? = try? JSONDecoder().decode(JSONValue.self, from: payload) {
                readAsObject = true
            } else {
                readAsObject = false
            }
            guard first == UInt8(ascii: "{") || readAsObject else { return payload }
            var failure = CourierError(.decoding, "the response is no JSON in which the encrypted fields could be checked")
            failure.code = "fieldIntegrity"
            throw failure
        }
        // Only a JSON object has top-level fields; an array or a single value is delivered as it is.
        guard var object = parsed as? [String: Any] else { return payload }
        // A key spelled like a sealed field but not as it (`cardNumber` or `CardNumber` for
        // `card_number`): a decoder's key strategy (`convertFromSnakeCase`) may read it as that
        // field, which would then arrive unchecked.
        let sealed = Set(self.fields.map(Self.folded))
        if let respelled = object.keys.first(where: { !self.fields.contains($0) && sealed.contains(Self.folded($0)) }) {
            var failure = CourierError(.decoding, "the response spells an encrypted field another way ('\(respelled)'), unchecked")
            failure.code = "fieldIntegrity"
            throw failure
        }
        var opened = false
        for name in self.fields {
            guard let value = object[name] else { continue }
            do {
                guard let text = value as? String, let combined = Data(base64Encoded: text) else {
                    throw CourierError.invalidRequest("not base64")
                }
                let plain = try AES.GCM.open(AES.GCM.SealedBox(combined: combined), using: self.key, authenticating: Data(name.utf8))
                object[name] = try JSONSerialization.jsonObject(with: plain, options: [.fragmentsAllowed])
                opened = true
            } catch {
                var failure = CourierError(
                    .decoding, "the encrypted field '\(name)' failed its integrity check (tampered, or sealed with another key)")
                failure.code = "fieldIntegrity"
                throw failure
            }
        }
        return opened ? try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]) : payload
    }

    /// A key as key strategies may read it: lowercased, without `_` and `-`.
    private static func folded(_ key: String) -> String {
        String(key.lowercased().unicodeScalars.filter { $0 != "_" && $0 != "-" })
    }
}
