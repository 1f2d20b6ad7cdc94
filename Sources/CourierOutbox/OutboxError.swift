import Foundation

/// What went wrong with an outbox's storage or input: a typed error, never a crash.
public struct OutboxError: Error, Sendable, CustomStringConvertible {
    /// What went wrong: one of a set of kinds that may grow in a minor version (a `switch` over
    /// them needs a `default` case). ``description`` is the kind's stable name.
    public struct Kind: Sendable, Hashable, CustomStringConvertible {
        private enum Base: String, Sendable, Hashable {
            case corrupt, locked, readOnly, full, cannotOpen, invalidRequest, notFound, storage
        }

        private let base: Base

        private init(_ base: Base) {
            self.base = base
        }

        /// The file is not a database, or is damaged.
        public static let corrupt = Kind(.corrupt)
        /// Another connection holds the database and did not let go in time.
        public static let locked = Kind(.locked)
        /// The file or its directory may not be written.
        public static let readOnly = Kind(.readOnly)
        /// The disk (or the database's size limit) is full.
        public static let full = Kind(.full)
        /// The file cannot be opened (a missing directory, a directory in its place).
        public static let cannotOpen = Kind(.cannotOpen)
        /// The request cannot be stored (it does not build, or its body is a stream).
        public static let invalidRequest = Kind(.invalidRequest)
        /// No item has that id, or it is not in a state that allows the operation.
        public static let notFound = Kind(.notFound)
        /// Any other storage failure.
        public static let storage = Kind(.storage)

        /// The kind's stable name, such as `corrupt`.
        public var description: String { self.base.rawValue }
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

    public var description: String { "OutboxError.\(self.kind.description): \(self.message)" }
}
