import Foundation
import HTTPTypes

extension Request {
    /// The request as a `curl` command line, with secrets hidden.
    ///
    /// Authorization, Cookie and other secret header values, token-like query parameters and secret
    /// fields of form or JSON bodies are replaced by the redactor's replacement text, as in the
    /// logs and HAR files. A streamed body is shown as `<stream>`. The body goes as `--data-raw`,
    /// so a body that starts with `@` is sent as written, never read from a local file by that
    /// name; a HEAD request is `--head` (with `-X HEAD`, curl waits for a body that never comes).
    public func cURLDescription(redactor: Redactor = .standard) -> String {
        var parts = ["curl"]
        if self.head.method == .head {
            parts.append("--head")
        } else if self.head.method != .get || self.body != nil {
            // A method is a token, which may hold characters a shell acts on (`` ` ``, `|`, `&`,
            // `$`): quoted unless it is letters, digits and hyphens.
            let method = self.head.method.rawValue
            let plain = method.utf8.allSatisfy {
                $0 == UInt8(ascii: "-") || (0x30...0x39).contains($0) || (0x41...0x5A).contains($0) || (0x61...0x7A).contains($0)
            }
            parts.append("-X \(plain ? method : Self.shellQuote(method))")
        }
        let url = self.url.map(redactor.redact(url:)) ?? redactor.redact(urlString: self.head.path ?? "/")
        parts.append(Self.shellQuote(url))
        for field in self.head.headerFields {
            parts.append("-H \(Self.shellQuote("\(field.name.rawName): \(redactor.value(of: field))"))")
        }
        if let body = self.body {
            if let contentType = body.contentType, self.head.headerFields[.contentType] == nil {
                parts.append("-H \(Self.shellQuote("Content-Type: \(contentType)"))")
            }
            if let bytes = body.bytes {
                if bytes.isEmpty {
                    parts.append("--data-raw ''")
                } else if String(data: bytes, encoding: .utf8) != nil {
                    let type = self.head.headerFields[.contentType] ?? body.contentType
                    parts.append("--data-raw \(Self.shellQuote(redactor.redact(body: bytes, contentType: type, limit: .max)))")
                } else {
                    parts.append("--data-raw '<\(bytes.count) bytes>'")
                }
            } else {
                parts.append("--data-raw '<stream>'")
            }
        }
        return parts.joined(separator: " ")
    }

    static func shellQuote(_ text: String) -> String {
        "'" + text.replacingOccurrences(of: "'", with: "'\\''") + "'"
    }
}
