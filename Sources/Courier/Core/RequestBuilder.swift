import Crypto
import Foundation
import HTTPTypes

/// Builds logical requests from endpoints.
enum RequestBuilder {
    /// What the wire stage will do with the endpoint's requests, as text: `""` for REST, else the
    /// protocol, the operation and whether it is a notification. Part of the cache and dedup keys,
    /// so two operations with the same params never share an answer.
    static func wireIdentity(of endpoint: EndpointDescription, configuration: Client.Configuration) -> String {
        if endpoint.wire == nil, endpoint.service == nil, configuration.defaultWireProtocol is RESTProtocol { return "" }
        let wire = endpoint.wire ?? endpoint.service.flatMap { configuration.wireProtocols[$0] } ?? configuration.defaultWireProtocol
        if wire is RESTProtocol { return "" }
        return "\(wire.wireIdentity):\(endpoint.operation ?? endpoint.name):\(endpoint.isNotification)"
    }

    /// The logical request, as the build stage makes it: a body a wire protocol boxes is left
    /// uncompressed (the wire stage compresses what it boxed), so keys made from it match the
    /// pipeline's.
    static func build(_ endpoint: EndpointDescription, parts: ClientParts, id: RequestID = RequestID()) throws -> Request {
        let boxed = !Self.wireIdentity(of: endpoint, configuration: parts.configuration).isEmpty
        return try self.build(endpoint, configuration: parts.configuration, base: parts.base, id: id, compressing: !boxed)
    }

    /// Builds the request; `configuration` is borrowed, not copied (it holds objects every
    /// request shares, whose reference counts would otherwise bounce between cores). Without
    /// `compressing`, a body the endpoint asks to compress is left as encoded (a wire protocol
    /// boxes it first; ``compress(_:in:)`` then does what is left).
    static func build(
        _ endpoint: EndpointDescription, configuration: Client.Configuration, base clientBase: BaseURL?, id: RequestID,
        compressing: Bool = true
    ) throws -> Request {
        var head: HTTPRequest
        // Whether the request goes to another origin than the base its client (or service) names:
        // the default fields that carry credentials stay home then (as on a redirect, RFC 9110 §15.4).
        var elsewhere = false
        if Self.isAbsoluteHTTP(endpoint.path) {
            guard let url = URL(string: Self.escapingTarget(ofAbsolute: endpoint.path)), let target = BaseURL(url),
                let components = URLComponents(url: url, resolvingAgainstBaseURL: false)
            else {
                let redactor = configuration.redactor
                let shown = redactor.redactFreeText(redactor.redact(urlString: endpoint.path))
                throw CourierError.invalidRequest("'\(shown)' is not a valid absolute URL")
            }
            // An encoded dot-segment (what `pathSegment:` makes of `.` or `..`) is refused here as
            // in a relative path; a literal one is the URL's own (a link a server gave).
            if PathSegment.holdsEncodedDotSegment(components.percentEncodedPath) {
                throw CourierError.invalidRequest(
                    "the endpoint's URL holds a '.' or '..' segment written percent-encoded, or between encoded slashes or backslashes")
            }
            // An absolute URL's path is kept as written: `/items/` and `/items` are different resources.
            var path = components.percentEncodedPath.isEmpty ? "/" : components.percentEncodedPath
            if let query = components.percentEncodedQuery { path += "?" + query }
            head = HTTPRequest(
                method: endpoint.method, scheme: target.scheme, authority: target.authority,
                path: BaseURL.appending(endpoint.query, to: path))
            // Without a base to compare with (a client with no base URL, and no service), there
            // is no "home" to keep them to: they go, as the app set them.
            elsewhere = Self.home(of: endpoint.service, in: configuration.servers, clientBase: clientBase).isElsewhere(target)
        } else {
            // A `.` or `..` segment written percent-encoded (what `pathSegment:` makes of a value
            // that is one) is resolved by servers as the dot-segment itself (RFC 3986 §6.2.2.2):
            // it would reach another resource than the path names.
            if PathSegment.holdsEncodedDotSegment(endpoint.path) {
                throw CourierError.invalidRequest(
                    "the endpoint's path holds a '.' or '..' segment written percent-encoded, or between encoded slashes or backslashes")
            }
            // A `..` written as it is would leave the base's path (`/v1` + `../admin`).
            if PathSegment.holdsDotDotSegment(endpoint.path) {
                throw CourierError.invalidRequest("the endpoint's path holds a '..' segment, which would leave the base URL's path")
            }
            let base: BaseURL
            if let service = endpoint.service {
                guard let servers = configuration.servers else {
                    throw CourierError.invalidRequest("the endpoint names the service '\(service)' but the client has no server directory")
                }
                base = try servers.base(for: service)
            } else if let clientBase {
                base = clientBase
            } else {
                let shown = configuration.redactor.redact(urlString: endpoint.path)
                throw CourierError.invalidRequest("the endpoint path '\(shown)' is relative and the client has no base URL")
            }
            head = HTTPRequest(
                method: endpoint.method, scheme: base.scheme, authority: base.authority,
                path: base.path(appending: endpoint.path, query: endpoint.query))
        }
        var fields = configuration.defaultHeaders
        if elsewhere {
            fields = configuration.redirects.withoutSecrets(fields, redactor: configuration.redactor)
        }
        for field in endpoint.headers {
            fields[field.name] = nil
        }
        fields.append(contentsOf: endpoint.headers)
        for (name, value) in endpoint.rawHeaders {
            let forbidden: Set<Unicode.Scalar> = ["\r", "\n", "\0"]
            if name.unicodeScalars.contains(where: forbidden.contains) || value.unicodeScalars.contains(where: forbidden.contains) {
                throw CourierError.invalidRequest(
                    "the header field '\(configuration.redactor.isSecret(headerName: name) ? configuration.redactor.replacement : name.debugDescription)' contains CR, LF or NUL"
                )
            }
            guard let fieldName = HTTPField.Name(name) else {
                throw CourierError.invalidRequest("'\(name.debugDescription)' is not a valid header field name")
            }
            fields[fieldName] = value
        }
        head.headerFields = fields
        if fields.contains(where: { TransportRules.isFraming($0.name) }) {
            TransportRules.dropCallersFraming(&head.headerFields, hasBody: endpoint.body != nil)
        }
        var body: RequestBody?
        if let endpointBody = endpoint.body {
            do {
                body = try endpointBody.encoded(with: configuration.encoder)
            } catch {
                throw CourierError.wrap(error)
            }
            if let contentType = body?.contentType, Self.bodyNamesType(contentType, endpoint: endpoint, fields: head.headerFields) {
                try TransportRules.checkContentType(contentType)
                head.headerFields[.contentType] = contentType
            }
        }
        if compressing, endpoint.compressesRequestBody { try Self.compress(&body, in: &head) }
        if configuration.decompression != nil, !head.headerFields.contains(.acceptEncoding) {
            head.headerFields.append(Self.acceptEncoding)
        }
        var request = Request(head: head, body: body, timeout: endpoint.timeout ?? configuration.timeout, name: endpoint.name, id: id)
        if !endpoint.hasOwnName { request.hasOwnName = false }
        if elsewhere { request.leavesHome = true }
        return request
    }

    /// An absolute URL with its path, query and fragment percent-encoded as a relative path is
    /// (``PercentEncoding/isTargetByte(_:)``; the `#` of a fragment kept), the scheme and authority
    /// as written: Foundation encodes a URL that holds a space again whole, `%20` as `%2520`.
    static func escapingTarget(ofAbsolute text: String) -> String {
        let utf8 = text.utf8
        guard let colon = utf8.firstIndex(of: UInt8(ascii: ":")),
            let authority = utf8.index(colon, offsetBy: 3, limitedBy: utf8.endIndex),
            let start = utf8[authority...].firstIndex(where: {
                $0 == UInt8(ascii: "/") || $0 == UInt8(ascii: "?") || $0 == UInt8(ascii: "#")
            })
        else { return text }
        let target = String(text[start...])
        let escaped = PercentEncoding.escapeTarget(target, keepingFragment: true)
        return escaped == target ? text : String(text[..<start]) + escaped
    }

    /// Whether a body's own `contentType` labels the request: always when no field names one;
    /// never when the endpoint names one; over a default (the client's, or its service's) as
    /// ``bodyTypeWins(_:over:)`` says. A multipart form's type carries its boundary and a
    /// URL-encoded form's says how its bytes read: a default such as `application/json` left the
    /// server unable to read either.
    static func bodyNamesType(_ contentType: String, endpoint: EndpointDescription, fields: HTTPFields) -> Bool {
        guard let current = fields[.contentType] else { return true }
        if endpoint.headers.contains(.contentType) || endpoint.rawHeaders.contains(where: { HTTPField.Name($0.name) == .contentType }) {
            return false
        }
        return Self.bodyTypeWins(contentType, over: current)
    }

    /// Whether a body's own content type wins over a default one: always, unless the body is
    /// plain JSON and the default a JSON type too, which refines it (`application/vnd.api+json`).
    static func bodyTypeWins(_ bodyType: String, over defaultType: String) -> Bool {
        let mediaType = FieldText.trimmed(String(bodyType.prefix { $0 != ";" })).lowercased()
        return mediaType != "application/json" || !isJSONContentType(defaultType)
    }

    /// The body gzipped and `gzip` added to `Content-Encoding`, for an endpoint that asks for
    /// it: after a coding already there (RFC 9110 §8.4: codings are listed in the order they
    /// were applied), such as one a wire protocol's `box` set.
    static func compress(_ body: inout RequestBody?, in head: inout HTTPRequest) throws {
        guard let plain = body else { return }
        do {
            body = try plain.gzipped()
        } catch {
            throw CourierError.wrap(error)
        }
        // `identity` is no coding applied (RFC 9110 §8.4.1): dropped, not listed before gzip.
        let applied = (head.headerFields[.contentEncoding] ?? "").split(separator: ",").map { FieldText.trimmed(String($0)) }
            .filter { !$0.isEmpty && $0.lowercased() != "identity" }
        head.headerFields[.contentEncoding] = (applied + ["gzip"]).joined(separator: ", ")
    }

    /// Whether `path` is an absolute http(s) URL: its scheme compared without case (RFC 3986
    /// §3.1), so `HTTPS://other.example/x` is never taken for a path below the base.
    /// Byte by byte, allocating nothing: every request's build asks, and most paths stop at the
    /// first byte (`/`).
    static func isAbsoluteHTTP(_ path: String) -> Bool {
        var bytes = path.utf8.makeIterator()
        for letter in "http".utf8 {
            guard let byte = bytes.next(), byte | 0x20 == letter else { return false }
        }
        var next = bytes.next()
        if let byte = next, byte | 0x20 == UInt8(ascii: "s") { next = bytes.next() }
        return next == UInt8(ascii: ":") && bytes.next() == UInt8(ascii: "/") && bytes.next() == UInt8(ascii: "/")
    }

    /// Where an absolute URL's defaults are at home, to keep their credentials there.
    enum Home {
        /// The base of the endpoint's service, or the client's.
        case known(BaseURL)
        /// No base at all: the client has none, and no directory names the endpoint's service.
        case none
        /// The endpoint names a service whose base cannot be told (not in the active
        /// environment, no directory, not http(s)): anywhere is elsewhere.
        case unknown

        /// Whether `target` is away from this home (with no home at all, nowhere is).
        func isElsewhere(_ target: BaseURL) -> Bool {
            switch self {
            case .known(let home): return !RequestBuilder.isSameOrigin(target, home)
            case .none: return false
            case .unknown: return true
            }
        }
    }

    /// The home of an endpoint's defaults: its service's base when it names one (the client's
    /// when there is no directory), else the client's.
    static func home(of service: ServiceID?, in servers: ServerDirectory?, clientBase: BaseURL?) -> Home {
        guard let service else { return clientBase.map(Home.known) ?? .none }
        guard let servers else { return clientBase.map(Home.known) ?? .none }
        return (try? servers.base(for: service)).map(Home.known) ?? .unknown
    }

    /// Whether `target` has the origin (scheme, host and port) of `home`; `false` without a home.
    static func isSameOrigin(_ target: BaseURL, _ home: BaseURL?) -> Bool {
        // Two authorities that cannot be read are not the same origin: credentials stay back.
        guard let home, let target = Authority(scheme: target.scheme, authority: target.authority),
            let origin = Authority(scheme: home.scheme, authority: home.authority)
        else { return false }
        return target == origin
    }

    /// The `Accept-Encoding` field sent when the client decodes content, made once: a field's
    /// value is checked each time one is made.
    private static let acceptEncoding = HTTPField(name: .acceptEncoding, value: ContentCoding.offered)
}
