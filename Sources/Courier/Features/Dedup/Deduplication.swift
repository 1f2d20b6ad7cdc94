import Crypto
import Foundation
import HTTPTypes

/// Whether identical in-flight requests of an endpoint share one network request.
public struct Deduplication: Sendable, Equatable {
    enum Mode: Sendable, Equatable {
        case automatic
        case disabled
        case key(String)
    }

    let mode: Mode

    /// On for GET and HEAD, off for other methods (the default).
    public static let automatic = Deduplication(mode: .automatic)
    /// Never shared: every call reaches the wire.
    public static let disabled = Deduplication(mode: .disabled)
    /// Shared for any method, with `key` added to the request's identity.
    ///
    /// Use it to opt a POST in (a search, a GraphQL query), or to tell apart requests that differ
    /// only by something outside the URL, headers and body.
    public static func key(_ key: String) -> Deduplication { Deduplication(mode: .key(key)) }
}

/// The client-wide deduplication settings.
public struct DeduplicationConfiguration: Sendable, Equatable {
    /// Whether deduplication runs at all.
    public var isEnabled: Bool
    /// The header fields that change a response and so belong to a request's identity.
    public var varyingHeaders: [HTTPField.Name]

    /// Creates settings.
    public init(isEnabled: Bool = true, varyingHeaders: [HTTPField.Name] = [.accept, .acceptLanguage, .acceptEncoding, .authorization, .cookie, .range]) {
        self.isEnabled = isEnabled
        self.varyingHeaders = varyingHeaders
    }
}

/// The identity of a request for deduplication: method, URL with a normalised query, the varying
/// header fields, a digest of the body and an optional endpoint key.
struct DeduplicationKey: Hashable, Sendable {
    let method: String
    let url: String
    let headers: [String]
    let bodyDigest: Data?
    let custom: String?

    /// The key of a request, or `nil` when it must not be shared.
    init?(request: Request, setting: Deduplication, configuration: DeduplicationConfiguration) {
        guard configuration.isEnabled else { return nil }
        let custom: String?
        switch setting.mode {
        case .disabled:
            return nil
        case .automatic:
            guard request.head.method == .get || request.head.method == .head else { return nil }
            custom = nil
        case .key(let key):
            custom = key
        }
        var bodyDigest: Data?
        if let body = request.body {
            // A streamed body cannot be hashed without consuming it: such requests are never shared.
            guard let bytes = body.bytes else { return nil }
            bodyDigest = Data(SHA256.hash(data: bytes))
        }
        self.method = request.head.method.rawValue
        self.url = Self.normalise(scheme: request.head.scheme, authority: request.head.authority, path: request.head.path)
        var headers: [String] = []
        for name in configuration.varyingHeaders {
            let values = request.head.headerFields[values: name]
            if !values.isEmpty { headers.append("\(name.canonicalName):\(values.joined(separator: ","))") }
        }
        // A revalidation (conditional request) must not share an unconditional request's answer.
        for name in [HTTPField.Name.ifNoneMatch, .ifModifiedSince] {
            if let value = request.head.headerFields[name] { headers.append("\(name.canonicalName):\(value)") }
        }
        self.headers = headers
        self.bodyDigest = bodyDigest
        self.custom = custom
    }

    /// `scheme://authority/path?query` with the scheme and host lower-cased and query items sorted.
    static func normalise(scheme: String?, authority: String?, path: String?) -> String {
        let target = path ?? "/"
        let parts = target.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
        var url = "\((scheme ?? "https").lowercased())://\((authority ?? "").lowercased())\(parts[0])"
        if parts.count == 2, !parts[1].isEmpty {
            url += "?" + parts[1].split(separator: "&").sorted().joined(separator: "&")
        }
        return url
    }
}
