import Foundation

/// A type-erased, single-pass asynchronous sequence of byte chunks.
///
/// Transports hand response bodies up as a `ByteStream`; request bodies that stream are stored as
/// one. Iterating pulls chunks from the source one at a time, so a slow consumer slows the
/// producer (back-pressure) instead of buffering.
public struct ByteStream: AsyncSequence, Sendable {
    /// A chunk of bytes.
    public typealias Element = Data

    private let makeNext: @Sendable () -> (() async throws -> Data?)
    private let onCancel: (@Sendable () -> Void)?

    /// Tells the producer that the consumer stopped reading early, so it can stop sending.
    ///
    /// Consumers call this when they give up on a body (for example past a size limit).
    public func cancel() {
        self.onCancel?()
    }

    /// Creates a stream from any asynchronous sequence of `Data` chunks.
    public init<Source: AsyncSequence & Sendable>(_ source: Source) where Source.Element == Data {
        self.makeNext = {
            let box = IteratorBox(source.makeAsyncIterator())
            return { try await box.next() }
        }
        self.onCancel = nil
    }

    /// Creates a stream from a closure that produces a `next` function each time the stream is iterated.
    ///
    /// - Parameter onCancel: called when the consumer stops reading early (see ``cancel()``).
    public init(onCancel: (@Sendable () -> Void)? = nil, makeNext: @escaping @Sendable () -> (() async throws -> Data?)) {
        self.makeNext = makeNext
        self.onCancel = onCancel
    }

    /// Creates a stream that yields the given chunks.
    public init(chunks: [Data]) {
        self.makeNext = {
            var index = 0
            return {
                guard index < chunks.count else { return nil }
                defer { index += 1 }
                return chunks[index]
            }
        }
        self.onCancel = nil
    }

    /// The iterator of a ``ByteStream``.
    public struct AsyncIterator: AsyncIteratorProtocol {
        let nextChunk: () async throws -> Data?

        /// Returns the next chunk, or `nil` at the end of the stream.
        public mutating func next() async throws -> Data? {
            try await self.nextChunk()
        }
    }

    /// Makes an iterator over the chunks.
    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(nextChunk: self.makeNext())
    }
}

/// Holds a non-sendable iterator for the one task that iterates it.
///
/// Only the task that created the iterator through `makeAsyncIterator()` calls `next()`, one call
/// at a time (the iterator contract), so the box is never used concurrently.
private final class IteratorBox<Iterator: AsyncIteratorProtocol>: @unchecked Sendable where Iterator.Element == Data {
    var iterator: Iterator
    init(_ iterator: Iterator) { self.iterator = iterator }
    func next() async throws -> Data? { try await self.iterator.next() }
}
