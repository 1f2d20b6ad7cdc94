import Crypto
import Foundation
import HTTPTypes

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// How far a transfer has got.
public struct TransferProgress: Sendable, Hashable {
    /// Bytes sent or received so far (for a resumed download, including the bytes already on disk).
    public var completedBytes: Int64
    /// The total, when known (`Content-Length`, `Content-Range` or the file size).
    public var expectedBytes: Int64?

    /// Creates a progress value.
    public init(completedBytes: Int64, expectedBytes: Int64?) {
        self.completedBytes = completedBytes
        self.expectedBytes = expectedBytes
    }

    /// The fraction done, from 0 to 1, when the total is known.
    public var fraction: Double? {
        guard let expected = self.expectedBytes else { return nil }
        return expected > 0 ? min(1, Double(self.completedBytes) / Double(expected)) : 1
    }
}

/// A running upload or download: its progress as an `AsyncSequence`, and its result.
public struct TransferTask<Success: Sendable>: Sendable {
    /// Progress updates; a slow reader sees the latest one (older ones are dropped, memory stays flat).
    /// The sequence ends when the transfer does.
    public let progress: AsyncStream<TransferProgress>
    let task: Task<Success, any Error>
    /// The control of the request the transfer runs, when its task is the request's own (an
    /// upload): the caller's cancel is recorded there, so a deadline that passes at the same
    /// moment does not turn it into a timeout.
    let control: RequestControl?

    init(progress: AsyncStream<TransferProgress>, task: Task<Success, any Error>, control: RequestControl? = nil) {
        self.progress = progress
        self.task = task
        self.control = control
    }

    /// The result, once the transfer is over.
    public var value: Success {
        get async throws { try await self.task.value }
    }

    /// Cancels the transfer; `value` then throws kind `cancelled` (a download keeps its partial file for resuming).
    public func cancel() {
        self.control?.cancelByCaller()
        self.task.cancel()
    }
}

/// Sends progress values to a ``TransferTask``'s sequence.
final class ProgressReporter: Sendable {
    let stream: AsyncStream<TransferProgress>
    private let continuation: AsyncStream<TransferProgress>.Continuation
    private let state = Locked((completed: Int64(0), expected: Int64?.none))

    init() {
        (self.stream, self.continuation) = AsyncStream.makeStream(of: TransferProgress.self, bufferingPolicy: .bufferingNewest(1))
    }

    /// Sets the starting point and total (a retry or a resumed download starts over from `completed`).
    func start(completed: Int64, expected: Int64?) {
        self.state.withLock { $0 = (completed, expected) }
        self.continuation.yield(TransferProgress(completedBytes: completed, expectedBytes: expected))
    }

    func add(_ count: Int) {
        let progress = self.state.withLock { state -> TransferProgress in
            state.completed += Int64(count)
            return TransferProgress(completedBytes: state.completed, expectedBytes: state.expected)
        }
        self.continuation.yield(progress)
    }

    func finish() { self.continuation.finish() }
}

/// A response whose body is still arriving: read it as chunks, lines or server-sent events.
public struct StreamingResponse: Sendable {
    /// The status.
    public var status: HTTPResponse.Status
    /// The header fields (without `Content-Encoding` and `Content-Length` when Courier decoded gzip or deflate).
    public var headers: HTTPFields
    /// The protocol version.
    public var version: HTTPVersion
    /// The body's length when announced and not content-coded.
    public var expectedLength: Int?
    /// The body, as chunks of bytes in arrival order; it can be read once.
    public var body: ByteStream

    /// The body as lines of text (LF, CRLF or CR endings), each at most `maxLineLength` bytes.
    public func lines(maxLineLength: Int = 1 << 20) -> LineSequence {
        LineSequence(base: self.body, maxLineLength: maxLineLength)
    }

    /// The body as server-sent events (`text/event-stream`): each line at most `maxLineLength`
    /// bytes and each event's data at most `maxEventSize` bytes, else the sequence throws kind
    /// `responseTooLarge` (memory stays bounded whatever the server sends).
    public func events(maxLineLength: Int = 1 << 20, maxEventSize: Int = 1 << 20) -> ServerSentEventSequence {
        ServerSentEventSequence(lines: self.lines(maxLineLength: maxLineLength), maxEventSize: maxEventSize)
    }
}

/// Where a download goes: a file name inside a chosen directory.
public struct DownloadDestination: Sendable, Hashable {
    /// The directory the file must stay inside.
    public var directory: URL
    /// The file's name: one path component, not `.` or `..`.
    public var fileName: String
    /// Whether an existing file at the destination may be replaced.
    public var overwrite: Bool

    /// Creates a destination.
    public init(directory: URL, fileName: String, overwrite: Bool = false) {
        self.directory = directory
        self.fileName = fileName
        self.overwrite = overwrite
    }

    /// The destination file, checked: it stays inside the directory, and does not exist unless
    /// overwriting is allowed (and then is no directory).
    func validated() throws -> URL {
        let name = self.fileName
        guard !name.isEmpty, name != ".", name != "..", !name.contains("/"), !name.contains("\0"), !name.hasPrefix(".courier-") else {
            throw CourierError.invalidRequest("the download file name '\(name)' is not a single, plain file name")
        }
        // NAME_MAX of the common file systems: a longer name could never be created.
        guard name.utf8.count <= Self.maxNameBytes else {
            throw CourierError.invalidRequest(
                "the download file name is \(name.utf8.count) bytes long, past the \(Self.maxNameBytes) a file name may have")
        }
        let directory = self.directory.standardizedFileURL.resolvingSymlinksInPath()
        let file = directory.appendingPathComponent(name).standardizedFileURL
        guard file.deletingLastPathComponent().path == directory.path else {
            throw CourierError.invalidRequest("the download destination leaves the directory \(directory.path)")
        }
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: directory.path, isDirectory: &isDirectory), isDirectory.boolValue else {
            throw CourierError.invalidRequest("the download directory \(directory.path) does not exist")
        }
        var existing: ObjCBool = false
        // Anything at the name counts, a symbolic link to nothing included (`fileExists` follows
        // links and sees none there; the final `link` would then fail after the whole body).
        var status = stat()
        if lstat(file.path, &status) == 0 {
            guard self.overwrite else { throw CourierError.invalidRequest("\(file.path) exists; allow overwriting to replace it") }
            _ = FileManager.default.fileExists(atPath: file.path, isDirectory: &existing)
            // Only a file can be replaced: a directory there (or a link to one) would fail the
            // final rename once the whole body is in, and every later try the same way.
            if existing.boolValue {
                throw CourierError.invalidRequest("\(file.path) is a directory; a download replaces only a file")
            }
        }
        return file
    }

    /// The longest file name the common file systems take (NAME_MAX), in bytes.
    static let maxNameBytes = 255

    /// The name of a hidden file kept beside the destination while it downloads:
    /// `.courier-<file name><suffix>`, or, when that would be longer than a file name may be,
    /// `.courier-<digest of the file name><suffix>` (the same for every suffix of one name).
    func hiddenName(_ suffix: String) -> String {
        let longestSuffix = ".partial.json"
        guard ".courier-".utf8.count + self.fileName.utf8.count + longestSuffix.utf8.count > Self.maxNameBytes else {
            return ".courier-\(self.fileName)\(suffix)"
        }
        let digest = SHA256.hash(data: Data(self.fileName.utf8)).prefix(16).map { String(format: "%02x", $0) }.joined()
        return ".courier-\(digest)\(suffix)"
    }
}

/// A finished download.
public struct DownloadResult: Sendable {
    /// Where the file is.
    public var url: URL
    /// The file's size.
    public var byteCount: Int64
    /// The offset the transfer resumed from (0 when it started from the beginning).
    public var resumedFrom: Int64
    /// The final response's status (200, or 206 for a part: when resumed, or from a server that
    /// answered with one from the first byte).
    public var status: HTTPResponse.Status
    /// The final response's header fields.
    public var headers: HTTPFields
}

extension RequestBody {
    /// The body, reporting each chunk the transport reads to `reporter` (restarting on a replay).
    func reporting(to reporter: ProgressReporter) -> RequestBody {
        let length = self.length
        let source: @Sendable () -> ByteStream
        switch self.storage {
        case .bytes(let data):
            // In pieces, so progress moves while a large in-memory body is written.
            // Offsets from the data's own start index: a slice (`data[1...]`) does not start at 0.
            source = {
                ByteStream(
                    chunks: stride(from: data.startIndex, to: data.endIndex, by: 64 * 1024).map {
                        data.subdata(in: $0..<min($0 + 64 * 1024, data.endIndex))
                    })
            }
        case .stream(let make):
            source = make
        }
        var body = RequestBody(
            storage: .stream({
                reporter.start(completed: 0, expected: length.map(Int64.init))
                // The length is checked below the report: a chunk that overflows it fails the
                // body before it is counted, so progress never passes the expected bytes.
                let stream = length.map { RequestBody.enforcing(length: $0, on: source()) } ?? source()
                return stream.observed { reporter.add($0.count) }
            }), contentType: self.contentType, length: length, isReplayable: self.isReplayable)
        body.shareSendCount(with: self)
        // The chunks are the same bytes: a signer can still hash them.
        body.streamedBytes = self.sentBytes
        return body
    }

    /// A replayable body streamed from a file, read in 256 KiB chunks each time it is sent.
    ///
    /// - Throws: ``CourierError`` of kind `invalidRequest` when the file cannot be read.
    public static func file(_ url: URL, contentType: String? = nil) throws -> RequestBody {
        let size = try FileChunks.regularFileSize(url)
        return .stream(length: size, contentType: contentType) { FileChunks.stream(url) }
    }

    /// This body compressed with gzip (its length then unknown for streams).
    func gzipped() throws -> RequestBody {
        switch self.storage {
        case .bytes(let data):
            return .data(try Deflater.gzip(data), contentType: self.contentType)
        case .stream(let make):
            // The plain stream is held to its announced length before it is compressed: a file
            // that grew or shrank after it was measured is refused as it is uncompressed, not
            // sent compressed with other bytes than were announced.
            let length = self.length
            var body = RequestBody(
                storage: .stream({ (length.map { RequestBody.enforcing(length: $0, on: make()) } ?? make()).transformed { Deflater() } }),
                contentType: self.contentType, length: nil, isReplayable: self.isReplayable)
            body.shareSendCount(with: self)
            return body
        }
    }
}

/// Reads a file as a stream of chunks.
enum FileChunks {
    static let chunkSize = 256 * 1024

    /// The size of the regular file at `url`, measured as it is read: through a symbolic link to
    /// it (whose own size, the length of the path it holds, was announced before). Throws kind
    /// `invalidRequest` for anything but a readable regular file (a directory, a device).
    static func regularFileSize(_ url: URL) throws(CourierError) -> Int {
        var status = stat()
        guard stat(url.path, &status) == 0, (status.st_mode & S_IFMT) == S_IFREG, access(url.path, R_OK) == 0 else {
            throw CourierError.invalidRequest("cannot read the file \(url.path): it is not a readable regular file")
        }
        return Int(status.st_size)
    }

    /// Opens the file at `url` (following a link, as ``regularFileSize(_:)`` measured it) for
    /// reading, when it is still a regular file. Opened without waiting: whatever now stands at
    /// the path (a FIFO put there since the size was measured, or for a resend) is refused with
    /// kind `invalidRequest`, where a plain open would block a thread until a writer came, beyond
    /// the reach of the deadline and of cancellation.
    static func openRegularFile(_ url: URL) throws(CourierError) -> FileHandle {
        let descriptor = open(url.path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard descriptor >= 0 else {
            let reason = String(cString: strerror(errno))
            throw CourierError.invalidRequest("cannot read the file \(url.path): \(reason)")
        }
        var status = stat()
        guard fstat(descriptor, &status) == 0, (status.st_mode & S_IFMT) == S_IFREG else {
            close(descriptor)
            throw CourierError.invalidRequest("cannot read the file \(url.path): it is no longer a regular file")
        }
        // Reads of a regular file never wait on O_NONBLOCK anyway; cleared all the same.
        _ = fcntl(descriptor, F_SETFL, fcntl(descriptor, F_GETFL) & ~O_NONBLOCK)
        return FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
    }

    static func stream(_ url: URL) -> ByteStream {
        ByteStream {
            var file: FileHandle?
            var opened = false
            return {
                if !opened {
                    opened = true
                    file = try Self.openRegularFile(url)
                }
                guard let handle = file else { return nil }
                let chunk: Data
                do {
                    chunk = try handle.read(upToCount: Self.chunkSize) ?? Data()
                } catch {
                    // A local file that fails halfway is no fault of the network: sending again
                    // would not help.
                    throw CourierError.invalidRequest("cannot read the file \(url.path): \(error.localizedDescription)")
                }
                if chunk.isEmpty {
                    try? handle.close()
                    file = nil
                    return nil
                }
                return chunk
            }
        }
    }
}
