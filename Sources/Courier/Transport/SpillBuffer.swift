import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The response chunks a session delivered and the reader has not read yet, in order: up to
/// `memoryLimit` bytes in memory, the rest in an unlinked temporary file that the reader drains
/// before memory is used again.
///
/// This is what bounds memory when a reader is slower than the network on a transport that
/// cannot stop the network (FoundationNetworking traps when a running task is suspended). The
/// file is unlinked as soon as it is made, so nothing is left on disk whatever ends the process.
/// Chunks are pushed from one queue at a time (the session's delegate queue); one reader pulls.
/// Memory holds at most `memoryLimit`, plus one write batch (1 MiB) bound for the file and one
/// chunk read back from it (256 KiB).
final class SpillBuffer: Sendable {
    /// How many bytes of a chunk read back from the file are handed to the reader at once.
    static let readChunk = 256 * 1024
    /// How many bytes bound for the file are gathered before one write.
    static let writeBatch = 1 << 20

    private struct State {
        /// Chunks in memory, read from `head` on.
        var memory: [Data] = []
        var head = 0
        var memoryBytes = 0
        /// The temporary file's descriptor, once something was spilled; bytes written and read.
        var file: Int32 = -1
        var written: Int64 = 0
        var read: Int64 = 0
        /// Chunks bound for the file, written once they add up to `writeBatch` (fewer, larger
        /// writes keep up with a fast network); they come after the file's unread bytes.
        var pending = Data()
        var finished = false
        var failure: (any Error)?
        var waiter: CheckedContinuation<Data?, any Error>?
    }

    private let state = Locked(State())
    private let memoryLimit: Int
    /// The most bytes unread in memory and the file together: a reader that falls further behind
    /// (or never reads) fails the response, so an endless body cannot fill the disk.
    private let unreadLimit: Int
    private let directory: URL

    init(memoryLimit: Int, unreadLimit: Int = .max, directory: URL = FileManager.default.temporaryDirectory) {
        self.memoryLimit = memoryLimit
        self.unreadLimit = max(unreadLimit, memoryLimit)
        self.directory = directory
    }

    deinit {
        let file = self.state.withLock { $0.file }
        if file >= 0 { close(file) }
    }

    /// Bytes pushed and not yet read, in memory and in the file.
    var unread: Int {
        self.state.withLock { $0.memoryBytes + Int($0.written - $0.read) + $0.pending.count }
    }

    /// Adds a chunk at the end. Throws when the chunk could not be written to the file (the disk
    /// is full, the directory cannot be written), or kind `responseTooLarge` when it would take
    /// what waits unread past the unread limit; the buffer has then failed with that error.
    func push(_ chunk: Data) throws {
        guard !chunk.isEmpty else { return }
        let handOver: CheckedContinuation<Data?, any Error>? = try self.state.withLock { state in
            guard !state.finished else { return nil }
            if let waiter = state.waiter {
                // The reader waits, so nothing is buffered: the chunk goes straight to it.
                state.waiter = nil
                return waiter
            }
            let unread = state.memoryBytes + Int(state.written - state.read) + state.pending.count
            if chunk.count > self.unreadLimit - unread {
                let error = CourierError(
                    .responseTooLarge, "the reader fell more than \(self.unreadLimit) bytes behind the response, which was stopped")
                state.failure = error
                state.finished = true
                throw error
            }
            let spilling = state.written > state.read || !state.pending.isEmpty
            if !spilling, state.memoryBytes + chunk.count <= self.memoryLimit {
                state.memory.append(chunk)
                state.memoryBytes += chunk.count
                return nil
            }
            state.pending.append(chunk)
            guard state.pending.count >= Self.writeBatch else { return nil }
            do {
                try self.spill(state.pending, into: &state)
                state.pending = Data()
            } catch {
                state.failure = error
                state.finished = true
                throw error
            }
            return nil
        }
        handOver?.resume(returning: chunk)
    }

    /// Ends the buffer: the reader gets what is buffered, then `nil`, or then `error`.
    func finish(throwing error: (any Error)? = nil) {
        let waiter: CheckedContinuation<Data?, any Error>? = self.state.withLock { state in
            guard !state.finished else { return nil }
            state.finished = true
            state.failure = error
            defer { state.waiter = nil }
            return state.waiter
        }
        if let error { waiter?.resume(throwing: error) } else { waiter?.resume(returning: nil) }
    }

    /// Ends the buffer from the reader's side: buffered chunks and the file are dropped.
    func discard(throwing error: any Error) {
        let waiter: CheckedContinuation<Data?, any Error>? = self.state.withLock { state in
            state.finished = true
            if state.failure == nil { state.failure = error }
            state.memory = []
            state.head = 0
            state.memoryBytes = 0
            state.pending = Data()
            if state.file >= 0 { close(state.file) }
            state.file = -1
            state.written = 0
            state.read = 0
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(throwing: error)
    }

    /// The next chunk, waiting for one; `nil` at the end.
    func next() async throws -> Data? {
        if let ready = try self.takeBuffered() { return ready }
        return try await withCheckedThrowingContinuation { continuation in
            let immediate: Result<Data?, any Error>? = self.state.withLock { state in
                do {
                    if let ready = try self.take(from: &state) { return .success(ready) }
                } catch {
                    return .failure(error)
                }
                if state.finished {
                    if let failure = state.failure { return .failure(failure) }
                    return .success(nil)
                }
                guard state.waiter == nil else {
                    return .failure(CourierError.invalidRequest("a response body is read by one reader at a time"))
                }
                state.waiter = continuation
                return nil
            }
            if let immediate { continuation.resume(with: immediate) }
        }
    }

    /// A buffered chunk, `nil` when nothing is buffered and the end is not reached; throws the
    /// failure once everything before it was read.
    private func takeBuffered() throws -> Data? {
        try self.state.withLock { state in
            if let ready = try self.take(from: &state) { return ready }
            if state.finished, let failure = state.failure { throw failure }
            return nil
        }
    }

    private func take(from state: inout State) throws -> Data? {
        if state.head < state.memory.count {
            let chunk = state.memory[state.head]
            state.memory[state.head] = Data()
            state.head += 1
            state.memoryBytes -= chunk.count
            if state.head == state.memory.count {
                state.memory.removeAll(keepingCapacity: true)
                state.head = 0
            } else if state.head > 64, state.head * 2 > state.memory.count {
                state.memory.removeFirst(state.head)
                state.head = 0
            }
            return chunk
        }
        guard state.written > state.read else {
            // The file is drained: what waits to be written is next.
            guard !state.pending.isEmpty else { return nil }
            defer { state.pending = Data() }
            return state.pending
        }
        let count = Int(min(Int64(Self.readChunk), state.written - state.read))
        var chunk = Data(count: count)
        let file = state.file
        let offset = off_t(state.read)
        var got = -1
        repeat {
            got = chunk.withUnsafeMutableBytes { buffer in pread(file, buffer.baseAddress, count, offset) }
        } while got < 0 && errno == EINTR
        guard got > 0 else {
            let error = CourierError.transport("a response spilled to a temporary file could not be read back (errno \(errno))")
            state.failure = error
            state.finished = true
            throw error
        }
        if got < count { chunk.removeSubrange(got...) }
        state.read += Int64(got)
        if state.read == state.written {
            // The file is drained: start it over, so it never grows past what waits unread, or
            // close it when nothing more can come.
            state.read = 0
            state.written = 0
            if state.finished {
                close(state.file)
                state.file = -1
            } else {
                _ = ftruncate(state.file, 0)
            }
        }
        return chunk
    }

    private func spill(_ chunk: Data, into state: inout State) throws {
        if state.file < 0 {
            let path = self.directory.appendingPathComponent("courier-response-\(UUID().uuidString)").path
            let file = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
            guard file >= 0 else {
                throw CourierError.transport(
                    "the response could not be buffered: cannot create a file in \(self.directory.path) (errno \(errno))")
            }
            unlink(path)
            state.file = file
        }
        var offset = state.written
        let file = state.file
        try chunk.withUnsafeBytes { (buffer: UnsafeRawBufferPointer) in
            var done = 0
            while done < buffer.count {
                let wrote = pwrite(file, buffer.baseAddress! + done, buffer.count - done, off_t(offset))
                if wrote < 0, errno == EINTR { continue }
                guard wrote > 0 else {
                    throw CourierError.transport("the response could not be buffered to a temporary file (errno \(errno))")
                }
                offset += Int64(wrote)
                done += wrote
            }
        }
        state.written = offset
    }
}
