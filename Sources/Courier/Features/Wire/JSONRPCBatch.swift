import Foundation
import HTTPTypes

/// Several JSON-RPC 2.0 calls sent in one HTTP request; each call gets its own result or error,
/// matched by id even when the server answers in another order.
///
/// ```swift
/// let batch = JSONRPCBatch(service: "math")
/// let sum = batch.call("sum", params: [1, 2, 3], as: Int.self)
/// let bad = batch.call("divide", params: [1, 0], as: Double.self)
/// batch.notify("log", params: ["event": "batched"])
/// let results = try await client.send(batch)
/// let total = try results[sum].get()      // 6
/// ```
public final class JSONRPCBatch: Sendable {
    private struct Entry: Sendable {
        var method: String
        var params: JSONValue?
        var id: Int?
        /// Why the params cannot be sent (they failed to encode, or are not an object or an
        /// array): sending the batch then fails with kind `invalidRequest`.
        var problem: String?
    }

    /// The params as a JSON value, or why they cannot be sent (JSON-RPC 2.0 §4.2: an object or
    /// an array).
    private static func params<Params: Encodable>(_ params: Params, of method: String) -> (JSONValue?, problem: String?) {
        do {
            let value = try JSONDecoder().decode(JSONValue.self, from: JSONEncoder().encode(params))
            switch value {
            case .object, .array: return (value, nil)
            default: return (nil, "the params of '\(method)' must be an object or an array (JSON-RPC 2.0 §4.2)")
            }
        } catch {
            return (nil, "the params of '\(method)' cannot be encoded: \(error)")
        }
    }

    /// The service the batch is sent to (`nil`: the client's base URL).
    public let service: ServiceID?
    /// The path, relative to the service's base URL.
    public let path: String
    private let entries = Locked<[Entry]>([])

    /// Creates an empty batch.
    public init(service: ServiceID? = nil, path: String = "") {
        self.service = service
        self.path = path
    }

    /// Adds a call whose result decodes as `type`.
    @discardableResult
    public func call<Params: Encodable, Result: Decodable & Sendable>(
        _ method: String, params: Params, as type: Result.Type
    ) -> JSONRPCBatchItem<Result> {
        let (value, problem) = Self.params(params, of: method)
        return self.add(method: method, params: value, problem: problem, type: type)
    }

    /// Adds a call without params whose result decodes as `type`.
    @discardableResult
    public func call<Result: Decodable & Sendable>(_ method: String, as type: Result.Type) -> JSONRPCBatchItem<Result> {
        self.add(method: method, params: nil, type: type)
    }

    /// Adds a notification: no id, no result.
    public func notify<Params: Encodable>(_ method: String, params: Params) {
        let (value, problem) = Self.params(params, of: method)
        self.entries.withLock { $0.append(Entry(method: method, params: value, id: nil, problem: problem)) }
    }

    private func add<Result: Decodable & Sendable>(
        method: String, params: JSONValue?, problem: String? = nil, type: Result.Type
    ) -> JSONRPCBatchItem<Result> {
        let id = self.entries.withLock { entries -> Int in
            let id = entries.count + 1
            entries.append(Entry(method: method, params: params, id: id, problem: problem))
            return id
        }
        return JSONRPCBatchItem(id: id)
    }

    /// The request body: an array of request objects.
    func body() throws -> Data {
        let entries = self.entries.current
        if let problem = entries.lazy.compactMap(\.problem).first { throw CourierError.invalidRequest(problem) }
        let objects: [JSONValue] = entries.map { entry in
            var object: [String: JSONValue] = ["jsonrpc": .string("2.0"), "method": .string(entry.method)]
            if let params = entry.params { object["params"] = params }
            if let id = entry.id { object["id"] = .integer(id) }
            return .object(object)
        }
        guard !objects.isEmpty else { throw CourierError.invalidRequest("a JSON-RPC batch needs at least one call") }
        return try JSONValue.array(objects).encoded()
    }

    var expectsResponse: Bool { self.entries.current.contains { $0.id != nil } }

    /// The ids of the batch's calls.
    var ids: Set<Int> { Set(self.entries.current.compactMap(\.id)) }
}

/// A token for one call of a ``JSONRPCBatch``.
public struct JSONRPCBatchItem<Result: Decodable & Sendable>: Sendable {
    /// The call's id in the batch.
    public let id: Int

    package init(id: Int) {
        self.id = id
    }
}

/// The answers to a batch, by call.
public struct JSONRPCBatchResults: Sendable {
    let responses: [Int: JSONRPCResponse]
    let sharedError: CourierError?
    let body: Data
    let decoder: JSONDecoder
    /// Ids the response answered more than once: which answer is the call's cannot be told.
    var duplicated: Set<Int> = []
    /// An error the response carried with a `null` id (JSON-RPC 2.0 §5: about a request whose id
    /// could not be read): what a call without an answer of its own reports.
    var unidentified: CourierError?
    /// Ids whose answer is not a well-formed response object: the call's outcome is unknown.
    var malformed: Set<Int> = []
    /// Whether the response held an item that may be some call's answer but names none it can
    /// be tied to (no id, an id written as text, an id no call has, an unreadable item without
    /// one): a call without an answer may have had it, so it does not take the `null`-id error
    /// for its own.
    var hasUnreadableItem = false

    /// The result of one call: its value, its own error object as kind `rpc`, or a decoding error.
    public subscript<Value>(item: JSONRPCBatchItem<Value>) -> Result<Value, CourierError> {
        if let sharedError { return .failure(sharedError) }
        if self.duplicated.contains(item.id) {
            return .failure(
                .decoding(
                    type: Value.self, codingPath: nil, reason: "the batch response answers id \(item.id) more than once", body: self.body,
                    underlying: nil))
        }
        if self.malformed.contains(item.id) {
            return .failure(
                .decoding(
                    type: Value.self, codingPath: nil,
                    reason: "the batch response's answer for id \(item.id) is not a JSON-RPC 2.0 response",
                    body: self.body, underlying: nil))
        }
        guard let response = self.responses[item.id] else {
            if let unidentified, !self.hasUnreadableItem { return .failure(unidentified) }
            return .failure(
                .decoding(
                    type: Value.self, codingPath: nil, reason: "the batch response has no answer for id \(item.id)", body: self.body,
                    underlying: nil))
        }
        do {
            let payload = try response.payload(expecting: item.id, body: self.body)
            do {
                return .success(try self.decoder.decode(Value.self, from: payload))
            } catch let error as DecodingError {
                return .failure(
                    .decoding(
                        type: Value.self, codingPath: error.courierCodingPath, reason: error.courierReason, body: payload, underlying: error
                    ))
            } catch {
                // The value's own check refused it (`init(from:)` threw an error of its own): still a
                // failure to decode, as for a single call.
                return .failure(
                    .decoding(type: Value.self, codingPath: nil, reason: "\(error)", body: payload, underlying: error))
            }
        } catch {
            return .failure(CourierError.wrap(error))
        }
    }
}

extension Client {
    /// Sends a JSON-RPC batch in one HTTP request and returns each call's own result.
    public func send(_ batch: JSONRPCBatch) async throws -> JSONRPCBatchResults {
        let body: Data
        do {
            body = try batch.body()
        } catch {
            throw CourierError.wrap(error)
        }
        var endpoint = Endpoint<Data>(
            name: "jsonrpc.batch", method: .post, path: batch.path, body: .data(body, contentType: "application/json"), decoding: .data)
        endpoint.service = batch.service
        endpoint.wire = RESTProtocol()
        let data = try await self.send(endpoint)
        guard batch.expectsResponse else {
            // §6: nothing comes back for a batch of notifications alone. An error object that
            // does (one, or in an array) is the batch refused, as for a notification sent alone.
            if let refusal = JSONRPCResponse.refusal(in: data) { throw refusal }
            return JSONRPCBatchResults(responses: [:], sharedError: nil, body: data, decoder: self.configuration.decoder)
        }
        return try JSONRPCBatchResults(parsing: data, decoder: self.configuration.decoder, ids: batch.ids)
    }
}

extension JSONRPCBatchResults {
    /// The answers in a batch response body: an array of response objects, or one object — for
    /// the whole batch, or, with an id of one of `ids`, for that call alone; throws kind
    /// `decoding` for anything else. (Without `ids`, one object is the whole batch's.)
    package init(parsing data: Data, decoder: JSONDecoder) throws {
        try self.init(parsing: data, decoder: decoder, ids: nil)
    }

    /// The answers in a batch response body whose calls have `ids` (`nil`: not known, and one
    /// object is then the whole batch's answer).
    package init(parsing data: Data, decoder: JSONDecoder, ids: Set<Int>?) throws {
        let root: JSONValue
        do {
            root = try JSONDecoder().decode(JSONValue.self, from: data)
        } catch {
            throw CourierError.decoding(
                type: JSONRPCBatchResults.self, codingPath: nil, reason: "the batch response is not JSON", body: data, underlying: error)
        }
        switch root {
        case .array(let items):
            var responses: [Int: JSONRPCResponse] = [:]
            var duplicated: Set<Int> = []
            var unidentified: CourierError?
            var malformed: Set<Int> = []
            var hasUnreadableItem = false
            for item in items {
                guard let response = try? JSONDecoder().decode(JSONRPCResponse.self, from: item.encoded()) else {
                    // Not a response object (no "jsonrpc", an error without a message): the call
                    // it names has an answer that cannot be read, never another's error.
                    if let id = JSONRPCResponse.numericID(ofMalformed: item), ids?.contains(id) ?? true {
                        if responses[id] != nil || !malformed.insert(id).inserted { duplicated.insert(id) }
                    } else {
                        hasUnreadableItem = true
                    }
                    continue
                }
                guard let id = response.numericID else {
                    if let error = response.error, response.id == nil || response.id == .null {
                        if unidentified == nil {
                            unidentified = CourierError.rpc(code: error.code, message: error.message, data: error.data)
                        }
                    } else {
                        // An id written as text (`"1"`), or a result without an id: some call's
                        // answer, which one cannot be told.
                        hasUnreadableItem = true
                    }
                    continue
                }
                // An id no call has: perhaps a call's answer with its id mangled.
                if let ids, !ids.contains(id) { hasUnreadableItem = true }
                if responses.updateValue(response, forKey: id) != nil || malformed.contains(id) { duplicated.insert(id) }
            }
            self = JSONRPCBatchResults(responses: responses, sharedError: nil, body: data, decoder: decoder)
            self.duplicated = duplicated
            self.unidentified = unidentified
            self.malformed = malformed
            self.hasUnreadableItem = hasUnreadableItem
        case .object:
            let response = try? JSONDecoder().decode(JSONRPCResponse.self, from: data)
            // One answer with one call's id is that call's alone (JSON-RPC 2.0 §6: a rejection of
            // the whole batch has a null id); the other calls have no answer. An id that is no
            // call's tells nothing apart: the answer stays the batch's.
            if let response, let id = response.numericID, ids?.contains(id) ?? false {
                self = JSONRPCBatchResults(responses: [id: response], sharedError: nil, body: data, decoder: decoder)
                return
            }
            // The server rejected the batch as a whole (for example an invalid request).
            let error =
                response?.error.map { CourierError.rpc(code: $0.code, message: $0.message, data: $0.data) }
                ?? CourierError.decoding(
                    type: JSONRPCBatchResults.self, codingPath: nil, reason: "expected an array of responses", body: data, underlying: nil)
            self = JSONRPCBatchResults(responses: [:], sharedError: error, body: data, decoder: decoder)
        default:
            throw CourierError.decoding(
                type: JSONRPCBatchResults.self, codingPath: nil, reason: "expected an array of responses", body: data, underlying: nil)
        }
    }
}
