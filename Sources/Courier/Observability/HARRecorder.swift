import Foundation
import HTTPTypes

/// An event monitor that records a client's traffic as an HTTP Archive (HAR 1.2) file.
///
/// One entry per caller's request, when it ends: the request as it went on the wire (its last
/// attempt, after redirects), the response with its body up to `bodyLimit` bytes, timings, the
/// HTTP version, and Courier's own facts as the custom field `_courier` (request id, endpoint,
/// source — network, cache, revalidated, stale, coalesced — attempts, error). Secrets are hidden
/// with the ``Redactor`` it is given (``Redactor/standard`` unless you pass one: pass the
/// client's when you added names to it), as in the log lines: header values, query values, and
/// secret-named keys of JSON and form bodies. The file opens in a browser's developer tools
/// (Network → Import HAR).
///
/// ```swift
/// let har = HARRecorder()
/// let client = Client(configuration: .init(transport: transport, baseURL: api) { $0.eventMonitors = [har] })
/// // … use the client …
/// try har.write(to: URL(fileURLWithPath: "session.har"))
/// ```
///
/// The server's IP address is not known to Courier's transports and is left out (it is optional
/// in HAR 1.2); DNS, connect and TLS timings are `-1` (not known).
public final class HARRecorder: EventMonitor, Sendable {
    /// The most bytes of a body an entry keeps (a longer one is cut and marked `_courier.truncated`).
    public let bodyLimit: Int
    /// What is hidden.
    public let redactor: Redactor
    /// A file rewritten after each entry, when given.
    public let file: URL?
    /// The most entries kept: past it, the oldest go (a long session's recorder would otherwise
    /// hold every body it ever saw, and rewrite them all after each request).
    public let maxEntries: Int
    /// The entries, and the lock held while the file is written: shared by the recorders that
    /// write one file (``shared(writingTo:redactor:)``).
    let log: Log

    /// The entries of one HAR document, and who writes its file. A request that ends while no
    /// write is under way writes it once, its own entry included; one ending meanwhile leaves a
    /// note instead of queueing, and the entries noted are written again in the background, not
    /// by the request that wrote first (which, while requests kept ending, rewrote the whole
    /// document again and again before its caller got its answer). So a request sent alone
    /// finds its entry in the file when it returns, and requests ending together find theirs
    /// there soon after.
    final class Log: Sendable {
        let entries = Locked<[HAR.Entry]>([])
        /// Whether a write is under way, and whether entries came after it began.
        let writing = Locked((active: false, stale: false))
        #if DEBUG
        /// Called as each write of the file begins (for tests).
        let writeBegins = Locked<(@Sendable () -> Void)?>(nil)
        #endif
    }

    /// Creates a recorder that keeps the newest 1,000 entries; with `file`, the HAR file is
    /// rewritten after each request ends.
    public convenience init(bodyLimit: Int = 256 * 1024, redactor: Redactor = .standard, writingTo file: URL? = nil) {
        self.init(bodyLimit: bodyLimit, maxEntries: 1000, redactor: redactor, writingTo: file)
    }

    /// Creates a recorder that keeps the newest `maxEntries` entries; with `file`, the HAR file is
    /// rewritten after each request ends.
    public init(bodyLimit: Int = 256 * 1024, maxEntries: Int, redactor: Redactor = .standard, writingTo file: URL? = nil) {
        self.bodyLimit = max(0, bodyLimit)
        self.maxEntries = max(1, maxEntries)
        self.redactor = redactor
        self.file = file
        self.log = Log()
    }

    private init(redactor: Redactor, file: URL, log: Log) {
        self.bodyLimit = 256 * 1024
        self.maxEntries = 1000
        self.redactor = redactor
        self.file = file
        self.log = log
    }

    /// The logs of the files written by ``shared(writingTo:redactor:)``, by path.
    private static let sharedLogs = Locked<[String: Log]>([:])

    /// A recorder that writes `file` together with every other recorder made for the same
    /// path in this process (each hiding secrets with its own redactor): the file holds every
    /// client's entries, not the last writer's alone. What `COURIER_HAR` makes for each client.
    static func shared(writingTo file: URL, redactor: Redactor) -> HARRecorder {
        let path = file.standardizedFileURL.path
        let log = Self.sharedLogs.withLock { logs in
            if let log = logs[path] { return log }
            let log = Log()
            logs[path] = log
            return log
        }
        return HARRecorder(redactor: redactor, file: file, log: log)
    }

    /// The number of entries recorded so far.
    public var count: Int { self.log.entries.withLock { $0.count } }

    /// The HAR document of everything recorded so far, as JSON.
    public func harData() throws -> Data {
        let document = HAR(log: .init(entries: self.log.entries.current))
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        return try encoder.encode(document)
    }

    /// Writes the HAR document to a file (atomically), readable by this user only: it holds
    /// response bodies.
    public func write(to url: URL) throws {
        try OwnerOnlyFile.write(try self.harData(), to: url)
    }

    public func requestFinished(_ request: RequestEvent, result: RequestResult) {
        self.record(request, result: result, error: nil)
    }

    public func requestFailed(_ request: RequestEvent, error: CourierError, result: RequestResult) {
        self.record(request, result: result, error: error)
    }

    public func requestCancelled(_ request: RequestEvent, error: CourierError, result: RequestResult) {
        self.record(request, result: result, error: error)
    }

    private func record(_ event: RequestEvent, result: RequestResult, error: CourierError?) {
        let entry = self.entry(event, result: result, error: error)
        let limit = self.maxEntries
        self.log.entries.withLock { entries in
            entries.append(entry)
            if entries.count > limit { entries.removeFirst(entries.count - limit) }
        }
        if let file = self.file { self.writeCoalesced(to: file) }
    }

    private func writeCoalesced(to file: URL) {
        let writes = self.log.writing.withLock { state -> Bool in
            if state.active {
                state.stale = true
                return false
            }
            state.active = true
            return true
        }
        guard writes else { return }
        self.writeFile(file)
        // Entries that came during the write: written in the background, so this request's
        // caller does not wait for other requests' entries.
        guard self.continuesWriting() else { return }
        DispatchQueue.global(qos: .utility).async {
            repeat {
                self.writeFile(file)
            } while self.continuesWriting()
        }
    }

    private func writeFile(_ file: URL) {
        #if DEBUG
        self.log.writeBegins.current?()
        #endif
        try? self.write(to: file)
    }

    /// Whether entries came during the write that just ended (the writer then writes again),
    /// else the end of writing.
    private func continuesWriting() -> Bool {
        self.log.writing.withLock { state -> Bool in
            if state.stale {
                state.stale = false
                return true
            }
            state.active = false
            return false
        }
    }

    private func entry(_ event: RequestEvent, result: RequestResult, error: CourierError?) -> HAR.Entry {
        let logical = event.request
        let fields = result.sentFields ?? logical.head.headerFields
        let url = self.redactor.redact(urlString: result.url.isEmpty ? logical.urlString : result.url)
        let version = result.version.map(Self.versionText) ?? ""
        let sentBody = result.sentBody ?? logical.body?.bytes
        var request = HAR.Request(
            method: logical.head.method.rawValue, url: url, httpVersion: version,
            headers: fields.map { HAR.Pair(name: $0.name.canonicalName, value: self.redactor.value(of: $0)) },
            queryString: Self.query(of: url), headersSize: -1, bodySize: sentBody?.count ?? 0
        )
        if let sentBody {
            let type = fields[.contentType] ?? logical.body?.contentType ?? ""
            request.postData = HAR.PostData(mimeType: type, text: self.text(of: sentBody, contentType: type).text)
        }
        let head = result.response
        let contentType = head?.headerFields[.contentType] ?? ""
        var content = HAR.Content(size: result.bodySize, mimeType: contentType)
        var truncated = false
        if let body = result.body, !body.isEmpty {
            let (text, encoding, cut) = self.text(of: body, contentType: contentType)
            content.text = text
            content.encoding = encoding
            truncated = cut
        }
        let response = HAR.Response(
            status: head?.status.code ?? 0, statusText: head.map(Self.statusText) ?? "", httpVersion: version,
            headers: (head?.headerFields ?? [:]).map { HAR.Pair(name: $0.name.canonicalName, value: self.redactor.value(of: $0)) },
            content: content, redirectURL: head?.headerFields[.location].map(self.redactor.redact(urlString:)) ?? "",
            headersSize: -1, bodySize: head == nil ? -1 : result.bodySize
        )
        let total = Self.milliseconds(result.duration)
        let blocked = Self.milliseconds(result.queued)
        let wait = min(result.wait.map(Self.milliseconds) ?? 0, max(0, total - blocked))
        let receive = max(0, total - blocked - wait)
        let timings = HAR.Timings(blocked: blocked, dns: -1, connect: -1, send: 0, wait: wait, receive: receive, ssl: -1)
        let courier = HAR.CourierFields(
            id: event.id.description, endpoint: event.name, source: result.source.rawValue, attempts: result.attempts,
            age: result.age, error: error.map { self.redactor.redactFreeText($0.shortDescription) },
            errorKind: error?.kind.description, truncated: truncated ? true : nil
        )
        return HAR.Entry(
            startedDateTime: Self.timestamp(event.date.addingTimeInterval(-result.duration.inSeconds)),
            time: blocked + wait + receive, request: request, response: response, cache: HAR.Cache(), timings: timings, _courier: courier
        )
    }

    /// A body as HAR text: base64 for a binary media type (images, `octet-stream`, archives,
    /// protobuf), redacted text when it is other UTF-8; and whether it was cut. Bytes that are neither (a
    /// multipart form with a file in it, JSON with a stray byte) cannot be redacted, so only
    /// their size is recorded: a password field beside a photo never reaches the file.
    private func text(of body: Data, contentType: String) -> (text: String, encoding: String?, truncated: Bool) {
        let cut = body.count > self.bodyLimit
        let type = contentType.lowercased()
        // A binary media type is bytes even when they happen to be valid UTF-8 (a small
        // protobuf message, an SVG image): base64, never the redactor's placeholder for binary
        // bodies, which recorded no content at all.
        // JSON under any name (`application/json+protobuf`, `…+json`) is text the redactor
        // reads; the media type decides, not its parameters (`; name="a.json"`).
        let mediaType = type.split(separator: ";", maxSplits: 1).first.map { FieldText.trimmed(String($0)) } ?? ""
        let subtype = mediaType.split(separator: "/", maxSplits: 1).last.map(String.init) ?? ""
        let isJSON = subtype == "json" || subtype.hasPrefix("json+") || subtype.hasSuffix("+json")
        let isBinary = !isJSON && Self.binaryTypes.contains(where: { mediaType.contains($0) })
        if !isBinary, case .success = TextCharset.decode(body, contentType: contentType) {
            // Redacted as in the logs; the limit is applied by the redactor (it marks the cut).
            return (self.redactor.redact(body: body, contentType: contentType, limit: self.bodyLimit), nil, cut)
        }
        guard isBinary else {
            return ("(\(body.count) bytes, not text in its charset: not recorded, as they cannot be redacted)", nil, cut)
        }
        return (body.prefix(self.bodyLimit).base64EncodedString(), "base64", cut)
    }

    /// Media types whose bodies are bytes, recorded as base64.
    private static let binaryTypes = [
        "image/", "audio/", "video/", "font/", "octet-stream", "protobuf", "application/zip", "application/gzip", "application/pdf",
    ]

    private static func query(of url: String) -> [HAR.Pair] {
        guard let items = URLComponents(string: url)?.queryItems else { return [] }
        return items.map { HAR.Pair(name: $0.name, value: $0.value ?? "") }
    }

    /// The reason phrase of RFC 9110 §15 for the code (transports differ in what they report), or the response's own.
    static func statusText(_ head: HTTPResponse) -> String {
        let standard: [Int: String] = [
            100: "Continue", 101: "Switching Protocols", 200: "OK", 201: "Created", 202: "Accepted", 203: "Non-Authoritative Information",
            204: "No Content", 205: "Reset Content", 206: "Partial Content", 300: "Multiple Choices", 301: "Moved Permanently",
            302: "Found",
            303: "See Other", 304: "Not Modified", 307: "Temporary Redirect", 308: "Permanent Redirect", 400: "Bad Request",
            401: "Unauthorized", 402: "Payment Required", 403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed",
            406: "Not Acceptable",
            407: "Proxy Authentication Required", 408: "Request Timeout", 409: "Conflict", 410: "Gone", 411: "Length Required",
            412: "Precondition Failed", 413: "Content Too Large", 414: "URI Too Long", 415: "Unsupported Media Type",
            416: "Range Not Satisfiable",
            417: "Expectation Failed", 421: "Misdirected Request", 422: "Unprocessable Content", 426: "Upgrade Required",
            428: "Precondition Required",
            429: "Too Many Requests", 431: "Request Header Fields Too Large", 500: "Internal Server Error", 501: "Not Implemented",
            502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout", 505: "HTTP Version Not Supported",
        ]
        return standard[head.status.code] ?? head.status.reasonPhrase
    }

    static func versionText(_ version: HTTPVersion) -> String {
        switch (version.major, version.minor) {
        case (2, _): return "HTTP/2.0"
        case (3, _): return "HTTP/3.0"
        case (0, _): return "unknown"
        default: return "HTTP/\(version.major).\(version.minor)"
        }
    }

    private static func milliseconds(_ duration: Duration) -> Double {
        (duration.inSeconds * 1_000_000).rounded() / 1000
    }

    private static func timestamp(_ date: Date) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter.string(from: date)
    }
}

/// The parts of a HAR 1.2 document Courier writes (field names as the format spells them).
struct HAR: Codable, Sendable {
    struct Log: Codable, Sendable {
        var version = "1.2"
        var creator = Creator()
        var entries: [Entry]
    }

    struct Creator: Codable, Sendable {
        var name = "Courier"
        var version = "1.0"
    }

    struct Entry: Codable, Sendable {
        var startedDateTime: String
        var time: Double
        var request: Request
        var response: Response
        var cache: Cache
        var timings: Timings
        // swiftlint:disable:next identifier_name
        var _courier: CourierFields
    }

    struct Pair: Codable, Sendable {
        var name: String
        var value: String
    }

    struct Request: Codable, Sendable {
        var method: String
        var url: String
        var httpVersion: String
        var cookies: [Pair] = []
        var headers: [Pair]
        var queryString: [Pair]
        var postData: PostData?
        var headersSize: Int
        var bodySize: Int
    }

    struct PostData: Codable, Sendable {
        var mimeType: String
        var text: String
    }

    struct Response: Codable, Sendable {
        var status: Int
        var statusText: String
        var httpVersion: String
        var cookies: [Pair] = []
        var headers: [Pair]
        var content: Content
        var redirectURL: String
        var headersSize: Int
        var bodySize: Int
    }

    struct Content: Codable, Sendable {
        var size: Int
        var mimeType: String
        var text: String?
        var encoding: String?
    }

    struct Cache: Codable, Sendable {}

    struct Timings: Codable, Sendable {
        var blocked: Double
        var dns: Double
        var connect: Double
        var send: Double
        var wait: Double
        var receive: Double
        var ssl: Double
    }

    struct CourierFields: Codable, Sendable {
        var id: String
        var endpoint: String
        var source: String
        var attempts: Int
        var age: Double?
        var error: String?
        var errorKind: String?
        var truncated: Bool?
    }

    var log: Log
}
