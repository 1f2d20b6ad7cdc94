import Courier
import Foundation
import HTTPTypes

/// Recorded exchanges on disk: one readable JSON file per logical request, for replaying an
/// app's real traffic in its tests.
///
/// A file is named `<endpoint name>-<fingerprint>.json`, where the fingerprint is a digest of the
/// logical request — method, path and query, wire protocol, body — without host, token or wire
/// id, so the same call gets the same name in every run and on every server. Record with
/// ``FixtureRecorder`` (an event monitor on a real client), replay with ``FixtureTransport``.
/// Fixtures suit REST endpoints: a JSON-RPC answer carries the id of the call it was recorded
/// for, which a replayed call does not have.
public enum Fixtures {
    /// The file a request is recorded in and replayed from, inside `directory`.
    public static func file(for request: Request, in directory: URL) -> URL {
        directory.appendingPathComponent("\(self.safeName(request.name))-\(self.fingerprint(of: request).prefix(16)).json")
    }

    static func fingerprint(of request: Request) -> String {
        if let logical = request.logical { return logical.fingerprint }
        // A request built outside a client: its own method, path and body.
        return Request.fingerprint(
            method: request.head.method.rawValue, pathAndQuery: request.head.path ?? "/", wire: "", body: request.body?.bytes)
    }

    static func safeName(_ name: String) -> String {
        let allowed = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
        let cleaned = String(name.map { allowed.contains($0) ? $0 : "_" }.prefix(80))
        return cleaned.isEmpty ? "request" : cleaned
    }

    /// One recorded exchange, as stored.
    struct Exchange: Codable {
        struct Field: Codable {
            var name: String
            var value: String
        }

        var endpoint: String
        var method: String
        var url: String
        var requestHeaders: [Field]
        var status: Int
        var responseHeaders: [Field]
        /// The body as text, when it is UTF-8.
        var body: String?
        /// The body as base64, when it is not.
        var bodyBase64: String?
    }
}

/// An event monitor that writes each exchange a client completes to a fixtures folder.
///
/// Header values, query values, secret-named JSON keys and form fields, and the secrets the
/// `Redactor` finds in other text (XML, plain text) are redacted before anything is written;
/// bytes of a binary media type are stored as they came; `Content-Encoding` and `Content-Length` are dropped (the body is
/// stored decoded). Answers from the cache and from a shared request are not recorded again.
public struct FixtureRecorder: EventMonitor, RecordsLogicalRequests {
    /// Where the files go.
    public let directory: URL
    /// What is hidden.
    public let redactor: Redactor

    /// Creates a recorder writing into `directory` (created if missing).
    public init(directory: URL, redactor: Redactor = .standard) {
        self.directory = directory
        self.redactor = redactor
    }

    public func requestFinished(_ request: RequestEvent, result: RequestResult) {
        guard result.source == .network || result.source == .revalidated, let head = result.response, let body = result.body else { return }
        self.write(request, status: head.status.code, fields: head.headerFields, body: body, sent: result.sentFields)
    }

    public func requestFailed(_ request: RequestEvent, error: CourierError, result: RequestResult) {
        // A status the endpoint refused is still an answer worth replaying.
        guard let head = result.response else { return }
        self.write(request, status: head.status.code, fields: head.headerFields, body: result.body ?? Data(), sent: result.sentFields)
    }

    private func write(_ event: RequestEvent, status: Int, fields: HTTPFields, body: Data, sent: HTTPFields?) {
        let dropped: Set<String> = ["content-encoding", "content-length", "transfer-encoding", "connection"]
        let stored = body.isEmpty ? body : self.redacted(body, contentType: fields[.contentType])
        var exchange = Fixtures.Exchange(
            endpoint: event.name, method: event.method.rawValue, url: self.redactor.redact(urlString: event.request.urlString),
            requestHeaders: (sent ?? event.request.head.headerFields).map {
                .init(name: $0.name.canonicalName, value: self.redactor.value(of: $0))
            },
            status: status,
            responseHeaders: fields.filter { !dropped.contains($0.name.canonicalName) }.map {
                .init(name: $0.name.canonicalName, value: self.redactor.value(of: $0))
            }
        )
        if let text = String(data: stored, encoding: .utf8) {
            exchange.body = text
        } else {
            exchange.bodyBase64 = stored.base64EncodedString()
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        guard let data = try? encoder.encode(exchange) else { return }
        try? FileManager.default.createDirectory(at: self.directory, withIntermediateDirectories: true)
        try? data.write(to: Fixtures.file(for: event.request, in: self.directory), options: .atomic)
    }

    /// A UTF-8 text body with its secrets redacted as in the logs (JSON kept valid JSON, a form a
    /// form; other text by the log's rules, which may hide more than secrets); any other body
    /// as it came: bytes of a binary media type (an SVG image, an Office file), and text in
    /// another charset, which written back as UTF-8 would no longer be what its
    /// `Content-Type` says. A body without a `Content-Type` that is UTF-8 text is redacted as
    /// text (JSON when it reads as JSON): a token answer sent without one kept its tokens.
    private func redacted(_ body: Data, contentType: String?) -> Data {
        let type = (contentType ?? "").lowercased()
        let mediaType = FieldText.trimmed(type.split(separator: ";", maxSplits: 1).first.map(String.init) ?? "")
        let isText =
            !mediaType.hasPrefix("image/")
            && (mediaType.isEmpty || mediaType.hasPrefix("text/") || mediaType.hasSuffix("/json") || mediaType.hasSuffix("+json")
                || mediaType.hasSuffix("/xml") || mediaType.hasSuffix("+xml") || mediaType == "application/x-www-form-urlencoded"
                || mediaType.hasSuffix("/javascript") || mediaType == "application/x-ndjson" || mediaType == "application/jwt"
                || mediaType.hasSuffix("+jwt"))
        // A JSON Web Token answer is a credential whole.
        if mediaType == "application/jwt" || mediaType.hasSuffix("+jwt") { return Data(self.redactor.replacement.utf8) }
        let charset = type.range(of: "charset=").map { FieldText.token(type[$0.upperBound...].prefix { $0 != ";" }) }
        guard isText, charset.map({ ["utf-8", "\"utf-8\"", "utf8"].contains($0) }) ?? true,
            let original = String(data: body, encoding: .utf8)
        else { return body }
        let text = self.redactor.redact(body: body, contentType: contentType, limit: Int.max)
        return text == original ? body : Data(text.utf8)
    }
}

/// A transport that answers from recorded fixtures (see ``Fixtures``), for tests without a network.
///
/// In strict mode (the default) a request with no fixture fails with kind `invalidRequest`,
/// naming the file it looked for; otherwise it goes to the `fallback` transport, or gets a `404`.
public final class FixtureTransport: Transport, ReadsLogicalRequests {
    /// Where the fixtures are.
    public let directory: URL
    /// Whether a request without a fixture fails.
    public let strict: Bool
    private let fallback: (any Transport)?

    /// Creates a replay transport over `directory`.
    public init(directory: URL, strict: Bool = true, fallback: (any Transport)? = nil) {
        self.directory = directory
        self.strict = strict
        self.fallback = fallback
    }

    /// Answers from the request's fixture.
    public func send(_ request: Request) async throws -> RawResponse {
        let file = Fixtures.file(for: request, in: self.directory)
        guard let data = try? Data(contentsOf: file) else {
            if self.strict {
                throw CourierError(
                    .invalidRequest,
                    "no fixture for \(request.name) \(request.head.method.rawValue) \(request.head.path ?? "/"): looked for \(file.path)")
            }
            if let fallback { return try await fallback.send(request) }
            return RawResponse(head: HTTPResponse(status: .notFound))
        }
        let exchange: Fixtures.Exchange
        do {
            exchange = try JSONDecoder().decode(Fixtures.Exchange.self, from: data)
        } catch {
            throw CourierError(.invalidRequest, "the fixture \(file.path) is not a recorded exchange: \(error)")
        }
        // HTTPResponse.Status traps outside 0...999: an edited file is an error, not a crash.
        guard (100...999).contains(exchange.status) else {
            throw CourierError(.invalidRequest, "the fixture \(file.path) has the status \(exchange.status), not an HTTP status")
        }
        if let body = request.body { _ = try await body.claimCollected() }
        var fields = HTTPFields()
        for field in exchange.responseHeaders {
            guard let name = HTTPField.Name(field.name) else { continue }
            fields.append(HTTPField(name: name, value: field.value))
        }
        let body = exchange.bodyBase64.flatMap { Data(base64Encoded: $0) } ?? Data((exchange.body ?? "").utf8)
        return RawResponse(head: HTTPResponse(status: .init(code: exchange.status), headerFields: fields), body: .data(body))
    }
}
