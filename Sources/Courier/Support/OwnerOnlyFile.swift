import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Writes files only their owner can read (mode 0600), atomically: the bytes go to a new
/// temporary file in the same directory, which is then renamed over the destination, so the
/// destination holds either the old content or the new, never part of it — after a crash of the
/// process, and, for a durable write, after a power loss too.
enum OwnerOnlyFile {
    /// The prefix of temporary files, so a directory scan can recognise (and remove) leftovers.
    static let temporaryPrefix = ".tmp-"

    /// Writes `data` to `url`; the temporary file's name is `temporaryPrefix` and a UUID.
    ///
    /// A `durable` write (credentials: losing them signs the user out) reaches the disk before
    /// the rename, and the rename before it returns: without that, a file system may keep the
    /// rename and lose the bytes at a power loss, leaving an empty file. Cache entries and the
    /// cookie file skip it: a lost entry is fetched again, and the cookie file is written on the
    /// path of responses that set cookies, where a flush to the drive would hold each of them.
    static func write(_ data: Data, to url: URL, temporaryPrefix: String = Self.temporaryPrefix, durable: Bool = false) throws {
        let directory = url.deletingLastPathComponent()
        let temporary = directory.appendingPathComponent("\(temporaryPrefix)\(UUID().uuidString)")
        // Not inherited by a process started meanwhile: the file may hold secrets.
        let descriptor = open(temporary.path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            throw CourierError.invalidRequest("could not create \(temporary.path): \(String(cString: strerror(errno)))")
        }
        var failure: Int32 = 0
        data.withUnsafeBytes { buffer in
            var offset = 0
            while offset < buffer.count {
                let written = Foundation.write(descriptor, buffer.baseAddress! + offset, buffer.count - offset)
                if written < 0 {
                    if errno == EINTR { continue }
                    failure = errno
                    return
                }
                offset += written
            }
        }
        if failure == 0, durable, !Self.flush(descriptor) { failure = errno }
        // `close` may report a write the system deferred (on network file systems).
        if close(descriptor) != 0, failure == 0 { failure = errno }
        guard failure == 0, rename(temporary.path, url.path) == 0 else {
            let reason = String(cString: strerror(failure != 0 ? failure : errno))
            unlink(temporary.path)
            throw CourierError.invalidRequest("could not write \(url.path): \(reason)")
        }
        if durable {
            // The rename itself is an entry of the directory: flushed with it.
            let directoryDescriptor = open(directory.path, O_RDONLY | O_CLOEXEC)
            if directoryDescriptor >= 0 {
                _ = fsync(directoryDescriptor)
                close(directoryDescriptor)
            }
        }
    }

    /// Flushes a file's bytes to the disk (on Apple platforms through the drive's own cache,
    /// which `fsync` alone does not); whether it did.
    private static func flush(_ descriptor: Int32) -> Bool {
        #if canImport(Darwin)
        if fcntl(descriptor, F_FULLFSYNC) == 0 { return true }
        #endif
        while fsync(descriptor) != 0 {
            if errno != EINTR { return false }
        }
        return true
    }
}
