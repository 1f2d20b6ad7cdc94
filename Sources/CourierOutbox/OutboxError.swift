import Foundation

/// What went wrong with an outbox's storage or input: a typed error, never a crash.
public struct OutboxError: Error, Sendable, CustomStringConvertible {
    /// What went wrong, as a small stable set of cases.
    public enum Kind: String, Sendable {
        /// The file is not a database, or is damaged.
        case corrupt
        /// Another connection holds the database and did not let go in time.
        case locked
        /// The file or its directory may not be written.
        case readOnly
        /// The disk (or the database's size limit) is full.
        case full
        /// The file cannot be opened (a missing directory, a directory in its place).
        case cannotOpen
        /// The request cannot be stored (it does not build, or its body is a stream).
        case invalidRequest
        /// No item has that id, or it is not in a state that allows the operation.
        case notFound
        /// Any other storage failure.
        case storage
    }

    /// What went wrong.
    public let kind: Kind
    /// What happened, for people.
    public let message: String
    /// Whether an enqueue that failed stored nothing (always true for a thrown enqueue: the
    /// transaction was rolled back).
    public let nothingStored: Bool

    /// Creates an error.
    public init(_ kind: Kind, _ message: String, nothingStored: Bool = true) {
        self.kind = kind
        self.message = message
        self.nothingStored = nothingStored
    }

    public var description: String { "OutboxError.\(self.kind.rawValue): \(self.message)" }
}
