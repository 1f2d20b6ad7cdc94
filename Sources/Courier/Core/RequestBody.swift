import Foundation

/// The body of an outgoing request: bytes in memory, or a stream.
///
/// A body says whether it can be sent more than once (``isReplayable``). Bytes in memory and
/// streams built from a factory can be replayed, so retries and 307/308 redirects may resend them.
/// A stream built from a single sequence is *one-shot* and never goes out twice: a retry stops
/// with the failure of the attempt that sent it, a 307 or 308 is returned as the answer (kind
/// `httpStatus` unless the endpoint accepts it), and a middleware that sends it a second time
/// gets kind ``CourierError/Kind/invalidRequest``.
public struct RequestBody: Sendable {
    enum Storage: Sendable {
        case bytes(Data)
        case stream(@Sendable () -> ByteStream)
    }

    let storage: Storage
    private var sendCount: SendCounter

    /// The `Content-Type` to send with the body, if the body knows it.
    public var contentType: String?
    /// The length in bytes, when known before sending.
    public let length: Int?
    /// Whether the body can be sent again (by a retry or a redirect).
    public let isReplayable: Bool

    init(storage: Storage, contentType: String?, length: Int?, isReplayable: Bool) {
        self.storage = storage
        self.contentType = contentType
        self.length = length
        self.isReplayable = isReplayable
        self.sendCount = SendCounter()
    }

    /// A body of bytes held in memory.
    public static func data(_ data: Data, contentType: String? = nil) -> RequestBody {
        RequestBody(storage: .bytes(data), contentType: contentType, length: data.count, isReplayable: true)
    }

    /// A one-shot body streamed from a sequence; it can be sent only once.
    public static func stream<Source: AsyncSequence & Sendable>(
        _ source: Source,
        length: Int? = nil,
        contentType: String? = nil
    ) -> RequestBody where Source.Element == Data {
        RequestBody(storage: .stream({ ByteStream(source) }), contentType: contentType, length: length, isReplayable: false)
    }

    /// A replayable streamed body: `makeStream` is called each time the body is sent.
    public static func stream(
        length: Int? = nil,
        contentType: String? = nil,
        replayable makeStream: @escaping @Sendable () -> ByteStream
    ) -> RequestBody {
        RequestBody(storage: .stream(makeStream), contentType: contentType, length: length, isReplayable: true)
    }

    /// The bytes, when the body is held in memory.
    public var bytes: Data? {
        if case .bytes(let data) = self.storage { return data }
        return nil
    }

    /// Bytes in memory that this stream body sends unchanged (an in-memory body wrapped to
    /// report upload progress), so they can be hashed without consuming the stream.
    var streamedBytes: Data?

    /// The exact bytes the body sends, when they are in memory: ``bytes``, or the bytes a
    /// progress-reporting stream sends.
    var sentBytes: Data? { self.bytes ?? self.streamedBytes }

    /// Claims the body for one send, and returns its content as a stream.
    ///
    /// Transports call this exactly once per attempt. A one-shot body claimed a second time throws
    /// ``CourierError`` of kind `invalidRequest`, so it can never be sent twice.
    public func claim() throws -> ByteStream {
        try self.markSent()
        switch self.storage {
        case .bytes(let data): return ByteStream(chunks: [data])
        case .stream(let make): return self.length.map { Self.enforcing(length: $0, on: make()) } ?? make()
        }
    }

    /// `stream`, failing with kind `invalidRequest` as soon as it brings more bytes than `length`,
    /// or when it ends with fewer: a body that does not match the length announced for it (a
    /// file that grew or shrank after it was measured) is refused the same way on every
    /// transport, and never retried, rather than sent with other bytes than were announced.
    static func enforcing(length: Int, on stream: ByteStream) -> ByteStream {
        ByteStream(onCancel: { stream.cancel() }) {
            var iterator = stream.makeAsyncIterator()
            var count = 0
            return {
                guard let chunk = try await iterator.next() else {
                    guard count == length else {
                        throw CourierError.invalidRequest("the request body ended after \(count) of the \(length) bytes it announced")
                    }
                    return nil
                }
                count += chunk.count
                guard count <= length else {
                    throw CourierError.invalidRequest("the request body brought more than the \(length) bytes it announced")
                }
                return chunk
            }
        }
    }

    /// Claims the body for one send and collects it into memory (for transports that cannot stream).
    public func claimCollected() async throws -> Data {
        try self.markSent()
        switch self.storage {
        case .bytes(let data): return data
        case .stream(let make):
            var collected = Data()
            for try await chunk in self.length.map({ Self.enforcing(length: $0, on: make()) }) ?? make() { collected.append(chunk) }
            return collected
        }
    }

    /// Makes this derived body (a wrapper of `original`) count sends together with it.
    mutating func shareSendCount(with original: RequestBody) {
        self.sendCount = original.sendCount
    }

    /// Whether the body has been claimed by a send already.
    public var hasBeenSent: Bool { self.sendCount.value > 0 }

    private func markSent() throws {
        let previous = self.sendCount.increment()
        if previous > 0 && !self.isReplayable {
            throw CourierError.invalidRequest("a one-shot request body cannot be sent twice")
        }
    }
}

/// Counts sends of one body across copies of the value.
final class SendCounter: Sendable {
    private let count = Locked(0)
    var value: Int { self.count.current }
    /// Increments and returns the previous count.
    func increment() -> Int {
        self.count.withLock { value in
            defer { value += 1 }
            return value
        }
    }
}
