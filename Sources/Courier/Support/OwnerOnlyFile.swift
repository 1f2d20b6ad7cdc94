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
/// destination holds either the old content or the new, never part of it.
enum OwnerOnlyFile {
    /// The prefix of temporary files, so a directory scan can recognise (and remove) leftovers.
    static let temporaryPrefix = ".tmp-"

    /// Writes `data` to `url`; the temporary file's name is `temporaryPrefix` and a UUID.
    static func write(_ data: Data, to url: URL, temporaryPrefix: String = Self.temporaryPrefix) throws {
        let directory = url.deletingLastPathComponent()
        let temporary = directory.appendingPathComponent("\(temporaryPrefix)\(UUID().uuidString)")
        let descriptor = open(temporary.path, O_WRONLY | O_CREAT | O_EXCL, 0o600)
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
        close(descriptor)
        guard failure == 0, rename(temporary.path, url.path) == 0 else {
            let reason = String(cString: strerror(failure != 0 ? failure : errno))
            unlink(temporary.path)
            throw CourierError.invalidRequest("could not write \(url.path): \(reason)")
        }
    }
}
