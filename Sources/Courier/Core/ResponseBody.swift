import Foundation

/// The body of a response: bytes in memory or a stream read from the connection.
///
/// A streamed body can be read once. ``collect(upTo:deadline:)`` reads it into memory and stops reading,
/// with ``CourierError`` of kind `responseTooLarge`, as soon as the limit would be passed, so memory
/// never grows beyond the limit.
public struct ResponseBody: AsyncSequence, Sendable {
    /// A chunk of bytes.
    public typealias Element = Data

    enum Storage: Sendable {
        case bytes(Data)
        case stream(ByteStream)
    }

    let storage: Storage
    /// The length announced by the server (`Content-Length`), if any.
    public let expectedLength: Int?

    /// A body held in memory.
    public static func data(_ data: Data) -> ResponseBody {
        ResponseBody(storage: .bytes(data), expectedLength: data.count)
    }

    /// A body streamed from the connection; a negative `expectedLength` counts as unknown.
    public static func stream(_ stream: ByteStream, expectedLength: Int?) -> ResponseBody {
        ResponseBody(storage: .stream(stream), expectedLength: expectedLength.flatMap { $0 >= 0 ? $0 : nil })
    }

    /// An empty body.
    public static let empty = ResponseBody.data(Data())

    /// This body without the length the server announced: a response that has no content
    /// (RFC 9112 §6.3: to HEAD, or with status 1xx, 204 or 304) may carry the `Content-Length`
    /// a GET would have got (RFC 9110 §8.6, §9.3.2), which is no size of this body.
    var withoutAnnouncedLength: ResponseBody {
        guard self.expectedLength != nil, case .stream = self.storage else { return self }
        return ResponseBody(storage: self.storage, expectedLength: nil)
    }

    /// The bytes, when the body is already in memory.
    public var bytes: Data? {
        if case .bytes(let data) = self.storage { return data }
        return nil
    }

    /// Makes an iterator over the chunks of the body.
    public func makeAsyncIterator() -> ByteStream.AsyncIterator {
        self.byteStream.makeAsyncIterator()
    }

    /// The body as a byte stream.
    var byteStream: ByteStream {
        switch self.storage {
        case .bytes(let data): return ByteStream(chunks: data.isEmpty ? [] : [data])
        case .stream(let stream): return stream
        }
    }

    /// Reads the whole body into memory, failing once it exceeds `limit` bytes.
    ///
    /// - Parameters:
    ///   - limit: the most bytes accepted.
    ///   - deadline: when reading must be over; checked as each chunk arrives. (Inside a client,
    ///     the pipeline's deadline stage also ends a body that stalls completely.)
    /// - Throws: ``CourierError`` of kind `responseTooLarge` when the announced length or the bytes
    ///   read pass `limit`, kind `timeout` past the deadline; reading stops at that point.
    public func collect(upTo limit: Int, deadline: ContinuousClock.Instant? = nil) async throws -> Data {
        if let expected = self.expectedLength, expected > limit {
            if case .stream(let stream) = self.storage { stream.cancel() }
            throw CourierError.responseTooLarge(limit: limit)
        }
        switch self.storage {
        case .bytes(let data):
            guard data.count <= limit else { throw CourierError.responseTooLarge(limit: limit) }
            return data
        case .stream(let stream):
            do {
                var iterator = stream.makeAsyncIterator()
                guard let first = try await iterator.next() else { return Data() }
                try Self.check(deadline, stream)
                guard first.count <= limit else {
                    stream.cancel()
                    throw CourierError.responseTooLarge(limit: limit)
                }
                // A single chunk is the common case for small bodies: return it without copying.
                guard let second = try await iterator.next() else { return first }
                return try await Self.collect(
                    first, second, rest: &iterator, of: stream, upTo: limit, expected: self.expectedLength, deadline: deadline
                )
            } catch {
                // Reading gave up on the body (a read failed: a decoder's error, a cut
                // connection): its producer may stop sending. (Not a second reader's refusal:
                // the first reader still owns the body.)
                if !ByteStream.isReadAgain(error) { stream.cancel() }
                throw error
            }
        }
    }

    /// The chunks after the first two, joined to them (apart from `collect(upTo:deadline:)`, so
    /// that a body of one chunk, the common case, allocates a small async frame).
    @inline(never)
    private static func collect(
        _ first: Data, _ second: Data, rest iterator: inout ByteStream.AsyncIterator, of stream: ByteStream,
        upTo limit: Int, expected: Int?, deadline: ContinuousClock.Instant?
    ) async throws -> Data {
        var collected = Data()
        // The announced length sizes the buffer, up to 8 MiB: past that it grows as bytes come. A
        // server's `Content-Length` of 2^63 − 1 under a limit as large (`maxResponseSize = .max`)
        // asked for that much memory at once, and trapped.
        collected.reserveCapacity(Swift.min(limit, expected ?? (first.count + second.count), 8 << 20))
        collected.append(first)
        var chunk: Data? = second
        while let next = chunk {
            guard collected.count + next.count <= limit else {
                stream.cancel()
                throw CourierError.responseTooLarge(limit: limit)
            }
            collected.append(next)
            chunk = try await iterator.next()
            try Self.check(deadline, stream)
        }
        return collected
    }

    private static func check(_ deadline: ContinuousClock.Instant?, _ stream: ByteStream) throws {
        if let deadline, ContinuousClock.now > deadline {
            stream.cancel()
            throw CourierError.timeout("the response body did not arrive before the deadline")
        }
    }

    /// Stops a streamed body without reading it (its connection is not reused).
    package func cancel() {
        if case .stream(let stream) = self.storage { stream.cancel() }
    }

    /// Reads and discards the body, up to `limit` bytes, so the connection can be reused.
    func discard(upTo limit: Int = 1 << 20) async {
        guard case .stream(let stream) = self.storage else { return }
        var seen = 0
        do {
            for try await chunk in stream {
                seen += chunk.count
                if seen > limit {
                    stream.cancel()
                    return
                }
            }
        } catch {}
    }
}

/// The first iteration of a leased body: when its iterator goes, the body is cancelled (unless
/// it has ended) and the lease ends.
private final class Iteration: Sendable {
    let stream: ByteStream
    let lease: BodyLease
    init(stream: ByteStream, lease: BodyLease) {
        self.stream = stream
        self.lease = lease
    }
    deinit {
        let stream = self.stream
        self.lease.endUnlessEnded { stream.cancel() }
    }
}

/// Runs an action once, when a streamed body ends, fails, is cancelled or is dropped unread;
/// a body dropped unread is also cancelled, so its connection stops receiving it.
final class BodyLease: Sendable {
    private struct State {
        var action: (@Sendable () -> Void)?
        var onDrop: (@Sendable () -> Void)?
        var iterated = false
    }

    private let state: Locked<State>

    init(_ action: @escaping @Sendable () -> Void) {
        self.state = Locked(State(action: action))
    }

    /// Runs the action unless it has run.
    func end() {
        let action = self.state.withLock { state -> (@Sendable () -> Void)? in
            defer { state.action = nil }
            return state.action
        }
        action?()
    }

    /// Runs `before` and then the action, unless the action has run.
    func endUnlessEnded(_ before: () -> Void) {
        let action = self.state.withLock { state -> (@Sendable () -> Void)? in
            defer { state.action = nil }
            return state.action
        }
        guard let action else { return }
        before()
        action()
    }

    /// Whether this is the body's first iteration (true once only).
    func beginsFirstIteration() -> Bool {
        self.state.withLock { state in
            defer { state.iterated = true }
            return !state.iterated
        }
    }

    /// Called at deinit when the action has not run: the body was dropped before its end.
    func whenDropped(_ cancel: @escaping @Sendable () -> Void) {
        self.state.withLock { $0.onDrop = cancel }
    }

    deinit {
        let (action, onDrop) = self.state.withLock { ($0.action, $0.onDrop) }
        if action != nil { onDrop?() }
        self.end()
    }
}

extension ResponseBody {
    /// This body, ending `lease` when the last chunk has been read, reading fails, the reader
    /// cancels, or the body is dropped (which also cancels it).
    func ending(with lease: BodyLease) -> ResponseBody {
        guard case .stream(let stream) = self.storage else {
            lease.end()
            return self
        }
        lease.whenDropped { stream.cancel() }
        let ended = ByteStream(onCancel: {
            stream.cancel()
            lease.end()
        }) {
            // The body is read once, by its first iterator, decided here (whatever the stream
            // below allows): a second reader is refused and owns nothing.
            guard lease.beginsFirstIteration() else { return { throw ByteStream.readAgain() } }
            let next = stream.makeAsyncIterator().nextChunk
            // A reader that lets its iterator go (a loop left early) gives the body up, even while
            // the response is held: it is cancelled and its slot is free (after the end, nothing
            // happens).
            let iteration = Iteration(stream: stream, lease: lease)
            return {
                _ = iteration
                do {
                    guard let chunk = try await next() else {
                        lease.end()
                        return nil
                    }
                    return chunk
                } catch {
                    // A failed read ends the reading: the producer may stop, and the slot is free
                    // (not on a second reader's refusal: the first reader still owns both).
                    guard !ByteStream.isReadAgain(error) else { throw error }
                    stream.cancel()
                    lease.end()
                    throw error
                }
            }
        }
        return .stream(ended, expectedLength: self.expectedLength)
    }
}
