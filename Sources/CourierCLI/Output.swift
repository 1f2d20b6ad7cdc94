import Foundation

/// Writes to standard output and standard error without trapping.
///
/// `FileHandle.write(_:)` traps when the write fails, and once SwiftNIO has opened a socket the
/// process ignores `SIGPIPE`, so output to a closed pipe (`courier request URL | head -c 10`) or a
/// full disk fails instead of ending the process quietly: these report the failure instead.
enum Output {
    /// Writes `data` to standard output; the error when it could not be written.
    static func standardOutput(_ data: Data) -> (any Error)? {
        do {
            try FileHandle.standardOutput.write(contentsOf: data)
            return nil
        } catch {
            return error
        }
    }

    /// Writes `text` to standard error, if it can be written (there is nowhere to report that it
    /// could not).
    static func standardError(_ text: String) {
        try? FileHandle.standardError.write(contentsOf: Data(text.utf8))
    }
}
