import Foundation

/// A `multipart/form-data` body (RFC 7578): text fields and files, streamed when sent.
///
/// ```swift
/// var form = MultipartForm()
/// form.add(name: "title", value: "Holiday")
/// try form.addFile(name: "photo", url: photoURL, contentType: "image/jpeg")
/// let endpoint = Endpoint<Void>(method: .post, path: "/photos", body: .body(try form.body()), decoding: .none)
/// ```
///
/// Through `AsyncHTTPClientTransport`, files are read from disk while the body is sent, never
/// held in memory (`URLSessionTransport` collects a body up to 1 MiB in memory and spools a longer
/// one to a temporary file first, see the Transports article); the body's length is known in
/// advance and it can be replayed (a retry reads the files again). Names and file names are
/// escaped as browsers do (`"` → `%22`, CR → `%0D`, LF → `%0A`), and also `\` → `%5C` and NUL →
/// `%00`, so no value can break out of its header; content types with CR or LF are refused.
public struct MultipartForm: Sendable {
    enum Content: Sendable {
        case data(Data)
        case file(URL, size: Int)
    }

    struct Part: Sendable {
        var header: Data
        var content: Content

        var length: Int {
            switch self.content {
            case .data(let data): return self.header.count + data.count + 2
            case .file(_, let size): return self.header.count + size + 2
            }
        }
    }

    /// The boundary between parts.
    public let boundary: String
    private(set) var parts: [Part] = []

    /// Creates an empty form with a random boundary.
    public init() {
        let random = (0..<16).map { _ in UInt8.random(in: 0...255) }
        self.boundary = "courier-\(random.hexString)"
    }

    /// The header block of each part, in order (for checks of what a part's fields produce).
    package var partHeaders: [Data] { self.parts.map(\.header) }

    /// The `Content-Type` of the body, with its boundary.
    public var contentType: String { "multipart/form-data; boundary=\(self.boundary)" }

    /// Adds a text field.
    public mutating func add(name: String, value: String) {
        self.parts.append(Part(header: self.header(name: name, fileName: nil, contentType: nil), content: .data(Data(value.utf8))))
    }

    /// Adds bytes as a file part.
    public mutating func addData(_ data: Data, name: String, fileName: String, contentType: String = "application/octet-stream") throws {
        try Self.check(contentType)
        self.parts.append(Part(header: self.header(name: name, fileName: fileName, contentType: contentType), content: .data(data)))
    }

    /// Adds a file from disk, read when the body is sent; the file name defaults to the file's.
    public mutating func addFile(name: String, url: URL, fileName: String? = nil, contentType: String = "application/octet-stream") throws {
        try Self.check(contentType)
        let size = try FileChunks.regularFileSize(url)
        let header = self.header(name: name, fileName: fileName ?? url.lastPathComponent, contentType: contentType)
        self.parts.append(Part(header: header, content: .file(url, size: size)))
    }

    /// The body: replayable, streamed, with a known length.
    public func body() -> RequestBody {
        let parts = self.parts
        let closing = Data("--\(self.boundary)--\r\n".utf8)
        let length = parts.reduce(closing.count) { $0 + $1.length }
        return .stream(length: length, contentType: self.contentType) {
            var pieces: [@Sendable () -> ByteStream] = []
            for part in parts {
                let header = part.header
                pieces.append { ByteStream(chunks: [header]) }
                switch part.content {
                case .data(let data): pieces.append { ByteStream(chunks: [data]) }
                case .file(let url, _): pieces.append { FileChunks.stream(url) }
                }
                pieces.append { ByteStream(chunks: [Data("\r\n".utf8)]) }
            }
            pieces.append { ByteStream(chunks: [closing]) }
            return ByteStream.concatenating(pieces)
        }
    }

    private func header(name: String, fileName: String?, contentType: String?) -> Data {
        var text = "--\(self.boundary)\r\nContent-Disposition: form-data; name=\"\(Self.escape(name))\""
        if let fileName { text += "; filename=\"\(Self.escape(fileName))\"" }
        text += "\r\n"
        if let contentType { text += "Content-Type: \(contentType)\r\n" }
        text += "\r\n"
        return Data(text.utf8)
    }

    /// Escapes a name or file name for a quoted header parameter.
    static func escape(_ text: String) -> String {
        var escaped = ""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": escaped += "%22"
            // A parser that reads backslash escapes in quoted strings (RFC 9110 §5.6.4) saw a name
            // ending in `\` run on into the next parameter: percent-encoded, as the quote is.
            case "\\": escaped += "%5C"
            case "\r": escaped += "%0D"
            case "\n": escaped += "%0A"
            // No field value may hold NUL (RFC 9110 §5.5): percent-encoded as CR and LF are.
            case "\0": escaped += "%00"
            default: escaped.unicodeScalars.append(scalar)
            }
        }
        return escaped
    }

    private static func check(_ contentType: String) throws {
        if contentType.unicodeScalars.contains(where: { $0 == "\r" || $0 == "\n" || $0 == "\0" }) {
            throw CourierError.invalidRequest("a multipart content type contains CR, LF or NUL")
        }
    }
}

extension ByteStream {
    /// The streams made by `makers`, one after another.
    static func concatenating(_ makers: [@Sendable () -> ByteStream]) -> ByteStream {
        ByteStream {
            var index = 0
            var current: ByteStream.AsyncIterator?
            return {
                while index < makers.count {
                    if current == nil { current = makers[index]().makeAsyncIterator() }
                    if let chunk = try await current!.next() { return chunk }
                    current = nil
                    index += 1
                }
                return nil
            }
        }
    }
}
