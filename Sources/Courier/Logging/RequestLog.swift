import Foundation
import HTTPTypes
import Logging

/// Writes the two log lines of a request: one when it starts, one when it ends.
struct RequestLog: Sendable {
    let logger: Logger?
    let redactor: Redactor

    func started(_ request: Request) {
        guard let logger, logger.logLevel <= .debug else { return }
        logger.debug("→ \(request.id) \(request.name) \(request.head.method.rawValue) \(self.url(of: request))")
    }

    func finished(_ request: Request, status: Int?, duration: Duration, bytes: Int, version: HTTPVersion?, outcome: String) {
        guard let logger, logger.logLevel <= .info else { return }
        let statusText = status.map(String.init) ?? "-"
        let versionText = version?.description ?? "-"
        logger.info("← \(request.id) \(request.name) \(request.head.method.rawValue) \(self.url(of: request)) \(statusText) \(Self.milliseconds(duration))ms \(bytes)B \(versionText) \(outcome)")
    }

    func retrying(_ request: Request, attempt: Int, after delay: Duration, because reason: String) {
        guard let logger, logger.logLevel <= .info else { return }
        logger.info("↻ \(request.id) \(request.name) \(request.head.method.rawValue) \(self.url(of: request)) attempt \(attempt) in \(Self.milliseconds(delay))ms after \(reason)")
    }

    private func url(of request: Request) -> String {
        request.url.map(self.redactor.redact(url:)) ?? (request.head.path ?? "/")
    }

    static func milliseconds(_ duration: Duration) -> String {
        let ms = duration.inSeconds * 1000
        return String(format: "%.1f", ms)
    }
}
