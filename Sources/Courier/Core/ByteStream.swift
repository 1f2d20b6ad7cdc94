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
    /// - Parameters:
    ///   - onCancel: called when the consumer stops reading early (see ``cancel()``).
    ///   - makeNext: called once per iteration; the function it returns gives the next chunk, or
    ///     `nil` at the end.
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

    /// The error of a second read of a body that can be read once.
    package static func readAgain() -> CourierError {
        CourierError.invalidRequest(Self.readAgainMessage)
    }

    /// Whether `error` is a second reader's refusal: the first reader still owns the body, so
    /// nothing may cancel it or give its slot back on the second's behalf.
    package static func isReadAgain(_ error: any Error) -> Bool {
        (error as? CourierError)?.message == Self.readAgainMessage
    }

    private static let readAgainMessage = "a streamed response body can be read once, and it has been read already"

    /// A stream of a transport's response body, which can be read once: a second iteration
    /// throws kind `invalidRequest` at its first read, on every transport alike (AsyncHTTPClient's
    /// body traps on a second iterator; another source may end at once, as if the body were empty).
    package static func readOnce(
        onCancel: (@Sendable () -> Void)? = nil, makeNext: @escaping @Sendable () -> (() async throws -> Data?)
    ) -> ByteStream {
        let started = Locked(false)
        return ByteStream(onCancel: onCancel) {
            let first = started.withLock { started in
                defer { started = true }
                return !started
            }
            guard first else { return { throw Self.readAgain() } }
            return makeNext()
        }
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

/// A stateful, pull-based transformation of a byte stream (decompression, compression).
///
/// The stream feeds input chunks and asks for output in bounded pieces, so one small input chunk
/// that expands enormously is never materialised at once.
protocol ChunkTransformer: SendableMetatype {
    /// Hands over the next input chunk (called only once ``produce()`` returned `nil`).
    mutating func feed(_ input: Data) throws
    /// The next piece of output from the input fed so far, or `nil` when more input is needed.
    mutating func produce() throws -> Data?
    /// Called at the end of the input: the remaining output, if any (called until `nil`).
    mutating func finish() throws -> Data?
}

extension ByteStream {
    /// This stream passed through a transformer made afresh for each iteration.
    func transformed<Transformer: ChunkTransformer>(_ make: @escaping @Sendable () -> Transformer) -> ByteStream {
        ByteStream(onCancel: { self.cancel() }) {
            let source = IteratorBox(self.makeAsyncIterator())
            var transformer = make()
            var ended = false
            return {
                while true {
                    if ended { return try transformer.finish() }
                    if let output = try transformer.produce() { return output }
                    if let chunk = try await source.next() {
                        try transformer.feed(chunk)
                    } else {
                        ended = true
                    }
                }
            }
        }
    }

    /// This stream, calling `observe` with each chunk as it passes.
    func observed(_ observe: @escaping @Sendable (Data) -> Void) -> ByteStream {
        ByteStream(onCancel: { self.cancel() }) {
            let source = IteratorBox(self.makeAsyncIterator())
            return {
                let chunk = try await source.next()
                if let chunk { observe(chunk) }
                return chunk
            }
        }
    }
}
