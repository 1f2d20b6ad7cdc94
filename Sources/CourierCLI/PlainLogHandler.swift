import Foundation
import Logging

/// Prints each log message on its own line, without timestamps or labels.
struct PlainLogHandler: LogHandler {
    enum Stream: Sendable { case standardOutput, standardError }

    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .debug
    let stream: Stream
    let prefix: String

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { self.metadata[key] }
        set { self.metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        let line = "\(self.prefix)\(event.message)\n"
        switch self.stream {
        case .standardOutput: print(line, terminator: "")
        case .standardError: Output.standardError(line)
        }
    }
}
