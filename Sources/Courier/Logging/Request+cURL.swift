import Foundation
import HTTPTypes

extension Request {
    /// The request as a `curl` command line, with secrets hidden.
    ///
    /// Authorization, Cookie and other secret header values, token-like query parameters and secret
    /// fields of form or JSON bodies are replaced by the redactor's replacement text. A streamed body
    /// is shown as `<stream>`.
    public func cURLDescription(redactor: Redactor = .standard) -> String {
        var parts = ["curl"]
        if self.head.method != .get || self.body != nil { parts.append("-X \(self.head.method.rawValue)") }
        let url = self.url.map(redactor.redact(url:)) ?? (self.head.path ?? "/")
        parts.append(Self.shellQuote(url))
        for field in self.head.headerFields {
            parts.append("-H \(Self.shellQuote("\(field.name.rawName): \(redactor.value(of: field))"))")
        }
        if let body = self.body {
            if let contentType = body.contentType, self.head.headerFields[.contentType] == nil {
                parts.append("-H \(Self.shellQuote("Content-Type: \(contentType)"))")
            }
            if let bytes = body.bytes {
                if let text = String(data: bytes, encoding: .utf8) {
                    parts.append("--data-binary \(Self.shellQuote(redactor.redactFreeText(text)))")
                } else {
                    parts.append("--data-binary '<\(bytes.count) bytes>'")
                }
            } else {
                parts.append("--data-binary '<stream>'")
            }
        }
        return parts.joined(separator: " ")
    }

    static func shellQuote(_ text: String) -> String {
        "'" + text.replacingOccurrences(of: "'", with: "'\\''") + "'"
    }
}
