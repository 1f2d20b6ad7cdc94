import Courier
import Foundation
import HTTPTypes

/// The identifier of an item in an ``Outbox``, stable across restarts.
public struct OutboxItemID: RawRepresentable, Hashable, Sendable, Codable, CustomStringConvertible {
    /// The row id in the outbox's database.
    public let rawValue: Int64

    /// Wraps a row id.
    public init(rawValue: Int64) {
        self.rawValue = rawValue
    }

    public var description: String { String(self.rawValue) }
}

/// One request in an ``Outbox``: what is sent, where it stands, and its result once delivered.
public struct OutboxItem: Sendable, Identifiable {
    /// Where an item stands.
    public enum State: String, Sendable, Codable, CaseIterable {
        /// Waiting to be sent (or to be sent again after a failure).
        case pending
        /// Being sent; an item found in this state when the outbox opens was interrupted and is sent again.
        case inFlight
        /// The server accepted it (a 2xx); its result is stored.
        case delivered
        /// It failed for good (a 4xx other than 408 and 429, too many attempts, or expired); the last error is stored.
        case dead
    }

    /// The result of a delivery: status, header fields and the body up to the outbox's limit.
    public struct Result: Sendable {
        /// The status of the response.
        public var status: Int
        /// The response's header fields.
        public var headers: HTTPFields
        /// The body, cut at ``Outbox/Configuration/resultBodyLimit``.
        public var body: Data
    }

    /// The item's id.
    public let id: OutboxItemID
    /// The queue it belongs to: items of one queue are delivered in order, one at a time.
    public let queue: String
    /// The app's own reference for the intent (unique in the outbox), if it gave one.
    public let reference: String?
    /// The endpoint's name.
    public let name: String
    /// The method.
    public let method: HTTPRequest.Method
    /// The absolute URL.
    public let url: String
    /// The `Idempotency-Key` sent with every attempt.
    public let idempotencyKey: String
    /// Where it stands.
    public let state: State
    /// How many attempts were started.
    public let attempts: Int
    /// The most attempts it may take.
    public let maxAttempts: Int
    /// When it was enqueued.
    public let createdAt: Date
    /// After this it is not sent any more (it goes dead).
    public let expiresAt: Date?
    /// Not sent again before this.
    public let nextAttemptAt: Date
    /// The last failure, as text.
    public let lastError: String?
    /// The delivery's result (also kept for a dead item that got a response).
    public let result: Result?
    /// When it was delivered or died.
    public let finishedAt: Date?
    /// Whether the app has acknowledged its completion (see ``Outbox/acknowledge(_:)``).
    public let acknowledged: Bool
}
