import Foundation
import HTTPTypes
import Logging

/// The event monitor that writes a client's log lines through swift-log.
///
/// Installed for you when ``Client/Configuration/logger`` is set. What each level prints:
///
/// | level | lines |
/// |---|---|
/// | `.info` | `→` when a request starts, `←` when it ends (status, duration, bytes, HTTP version, outcome), `↻` before each retry |
/// | `.debug` | also `⋯` when a request waits for a slot, `⤷` for each redirect followed, `⇆` when a request joins an identical one in flight, `⟳` when an authenticator refreshed its credential, `▣` when a response is stored in the cache |
/// | `.trace` | also, when `logsBodies` is on, `⇡` the request body as sent and `⇣` the response body, each capped at `bodyLimit` bytes, secrets redacted by key name, binary shown as a byte count |
///
/// Every line starts with the arrow and the request id, and names URLs with secrets redacted.
public struct LogMonitor: EventMonitor {
    /// Where the lines go.
    public let logger: Logger
    /// What is hidden in URLs and bodies.
    public let redactor: Redactor
    /// Whether bodies are logged at `.trace`.
    public let logsBodies: Bool
    /// The most bytes of a body one line shows.
    public let bodyLimit: Int

    /// Creates a log monitor.
    public init(logger: Logger, redactor: Redactor = .standard, logsBodies: Bool = false, bodyLimit: Int = 4096) {
        self.logger = logger
        self.redactor = redactor
        self.logsBodies = logsBodies
        self.bodyLimit = bodyLimit
    }

    public func requestStarted(_ request: RequestEvent) {
        guard self.logger.logLevel <= .info else { return }
        let head = request.request.head
        self.logger.info(
            Logger.Message(
                stringLiteral: Self.join(
                    "→ ", request.id.description, " ", request.name, " ", head.method.rawValue, " ", self.url(of: request.request)
                )), source: Self.source)
    }

    public func retrying(_ request: RequestEvent, attempt: Int, after delay: Duration, reason: String) {
        guard self.logger.logLevel <= .info else { return }
        self.logger.info(
            "↻ \(request.id) \(request.name) \(request.method.rawValue) \(self.url(of: request.request)) attempt \(attempt) in \(Self.milliseconds(delay))ms after \(reason)"
        )
    }

    public func requestQueued(_ request: RequestEvent, host: String) {
        guard self.logger.logLevel <= .debug else { return }
        self.logger.debug("⋯ \(request.id) \(request.name) waits for a slot for \(host)")
    }

    public func redirected(_ request: RequestEvent, status: Int, location: String) {
        guard self.logger.logLevel <= .debug else { return }
        // Hidden with this monitor's redactor too: the client's may hide less.
        self.logger.debug("⤷ \(request.id) \(request.name) \(status) to \(self.redactor.redact(urlString: location))")
    }

    public func deduplicationJoined(_ request: RequestEvent, sharing: RequestID) {
        guard self.logger.logLevel <= .debug else { return }
        self.logger.debug("⇆ \(request.id) \(request.name) joins \(sharing)")
    }

    public func authRefreshed(_ request: RequestEvent) {
        guard self.logger.logLevel <= .debug else { return }
        self.logger.debug("⟳ \(request.id) \(request.name) credential refreshed")
    }

    public func cacheStored(_ request: RequestEvent) {
        guard self.logger.logLevel <= .debug else { return }
        self.logger.debug("▣ \(request.id) \(request.name) stored in the cache")
    }

    public func requestFinished(_ request: RequestEvent, result: RequestResult) {
        guard self.logger.logLevel <= .info else { return }
        let outcome: String
        switch (result.delivery, result.source) {
        case (.streaming, _): outcome = "streaming"
        case (.downloaded(let offset), _): outcome = offset > 0 ? "downloaded(resumed at \(offset))" : "downloaded"
        case (.collected, .network): outcome = "success"
        case (.collected, .coalesced): outcome = "success(coalesced)"
        case (.collected, .cache): outcome = "success(cache, age \(Int(result.age ?? 0))s)"
        case (.collected, .revalidated): outcome = "success(revalidated)"
        case (.collected, .stale): outcome = "success(stale, age \(Int(result.age ?? 0))s)"
        }
        self.finished(request, result: result, outcome: outcome)
    }

    public func requestFailed(_ request: RequestEvent, error: CourierError, result: RequestResult) {
        guard self.logger.logLevel <= .info else { return }
        self.finished(request, result: result, outcome: "failure(\(error.shortDescription))")
    }

    public func requestCancelled(_ request: RequestEvent, error: CourierError, result: RequestResult) {
        guard self.logger.logLevel <= .info else { return }
        self.finished(request, result: result, outcome: "failure(\(error.shortDescription))")
    }

    private func finished(_ request: RequestEvent, result: RequestResult, outcome: String) {
        // One string of the exact size, copied from the parts: this line and the "→" line are
        // written for every request, and interpolation grows its buffer several times.
        let head = request.request.head
        self.logger.info(
            Logger.Message(
                stringLiteral: Self.join(
                    "← ", request.id.description, " ", request.name, " ", head.method.rawValue, " ", self.url(of: request.request), " ",
                    result.response.map { String($0.status.code) } ?? "-", " ", Self.milliseconds(result.duration), "ms ",
                    String(result.bodySize), "B ",
                    result.version?.description ?? "-", " ", outcome
                )), source: Self.source)
        guard self.logsBodies, self.logger.logLevel <= .trace else { return }
        if let sent = result.sentBody ?? request.request.body?.bytes {
            let type = result.sentFields?[.contentType] ?? request.request.body?.contentType
            self.logger.trace("⇡ \(request.id) \(Self.escaped(self.redactor.redact(body: sent, contentType: type, limit: self.bodyLimit)))")
        }
        if let body = result.body {
            self.logger.trace(
                "⇣ \(request.id) \(Self.escaped(self.redactor.redact(body: body, contentType: result.response?.headerFields[.contentType], limit: self.bodyLimit)))"
            )
        }
    }

    /// A body's text as one log line: line breaks and tabs as `\n`, `\r`, `\t`, other control,
    /// line-separator and bidirectional-override characters as `\u{…}` — a server's body cannot
    /// forge a line of its own in the log or send escape sequences to a terminal that shows it.
    static func escaped(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: CourierError.breaksALine) else { return text }
        var result = String.UnicodeScalarView()
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\n": result.append(contentsOf: #"\n"#.unicodeScalars)
            case "\r": result.append(contentsOf: #"\r"#.unicodeScalars)
            case "\t": result.append(contentsOf: #"\t"#.unicodeScalars)
            case _ where CourierError.breaksALine(scalar):
                result.append(contentsOf: "\\u{\(String(scalar.value, radix: 16, uppercase: true))}".unicodeScalars)
            default: result.append(scalar)
            }
        }
        return String(result)
    }

    /// The module name swift-log would work out from the file of each call.
    private static let source = "Courier"

    /// The parts, one after the other, in a string allocated once at its final size.
    static func join(_ parts: String...) -> String {
        var total = 0
        for part in parts { total += part.utf8.count }
        return String(unsafeUninitializedCapacity: total) { buffer in
            var offset = 0
            for var part in parts {
                part.withUTF8 { bytes in
                    guard let base = bytes.baseAddress else { return }
                    (buffer.baseAddress! + offset).initialize(from: base, count: bytes.count)
                    offset += bytes.count
                }
            }
            return offset
        }
    }

    /// The request's URL, secrets redacted.
    private func url(of request: Request) -> String {
        // Without a query or user info there is nothing to hide: the parts as they are.
        let head = request.head
        let authority = head.authority ?? ""
        let path = head.path ?? "/"
        guard Self.has(UInt8(ascii: "?"), in: path) || Self.has(UInt8(ascii: "@"), in: authority) else {
            return Self.join(head.scheme ?? "https", "://", authority, path)
        }
        return self.redactor.redact(urlString: request.urlString)
    }

    private static func has(_ byte: UInt8, in text: String) -> Bool {
        var text = text
        return text.withUTF8 { $0.contains(byte) }
    }

    /// Milliseconds with one decimal ("12.3"), without Foundation's formatter on the hot path.
    static func milliseconds(_ duration: Duration) -> String {
        let tenths = Int((min(max(0, duration.inSeconds), 1e12) * 10_000).rounded())
        return Self.join(String(tenths / 10), ".", String(tenths % 10))
    }
}
