import Foundation
import HTTPTypes

/// An OAuth 2.0 token endpoint (RFC 6749 §3.2) and the grants Courier uses with it.
public struct OAuth2TokenEndpoint: Sendable {
    /// A grant to request a token with.
    public enum Grant: Sendable {
        /// Resource owner password credentials (§4.3).
        case password(username: String, password: String, scope: String?)
        /// Client credentials (§4.4).
        case clientCredentials(scope: String?)
        /// A refresh token (§6).
        case refreshToken(String)
        /// An authorization code (§4.1.3) with its PKCE verifier (RFC 7636 §4.5).
        case authorizationCode(code: String, redirectURI: String, codeVerifier: String)
    }

    /// The token endpoint's URL.
    public var url: URL
    /// The client identifier.
    public var clientID: String
    /// The client secret (sent with HTTP Basic authentication), for confidential clients.
    public var clientSecret: String?
    /// The revocation endpoint (RFC 7009), when the server has one: sign-out revokes the tokens there.
    public var revocationURL: URL?

    /// Creates a token endpoint.
    public init(url: URL, clientID: String, clientSecret: String? = nil, revocationURL: URL? = nil) {
        self.url = url
        self.clientID = clientID
        self.clientSecret = clientSecret
        self.revocationURL = revocationURL
    }

    /// The request for a grant: a form POST, client authentication by Basic when there is a secret.
    public func endpoint(for grant: Grant) -> Endpoint<OAuth2Token> {
        var fields: [URLQueryItem]
        switch grant {
        case .password(let username, let password, let scope):
            fields = [
                .init(name: "grant_type", value: "password"), .init(name: "username", value: username),
                .init(name: "password", value: password),
            ]
            if let scope { fields.append(.init(name: "scope", value: scope)) }
        case .clientCredentials(let scope):
            fields = [.init(name: "grant_type", value: "client_credentials")]
            if let scope { fields.append(.init(name: "scope", value: scope)) }
        case .refreshToken(let token):
            fields = [.init(name: "grant_type", value: "refresh_token"), .init(name: "refresh_token", value: token)]
        case .authorizationCode(let code, let redirectURI, let verifier):
            fields = [
                .init(name: "grant_type", value: "authorization_code"), .init(name: "code", value: code),
                .init(name: "redirect_uri", value: redirectURI), .init(name: "code_verifier", value: verifier),
            ]
        }
        var endpoint = Endpoint<OAuth2Token>(
            name: "oauth2.token", method: .post, path: self.url.absoluteString, headers: [.accept: "application/json"], body: nil,
            decoding: ResponseDecoding { input in try Self.decodeToken(input.body) }
        )
        self.authenticate(&endpoint, fields: fields)
        endpoint.deduplication = .disabled
        endpoint.wire = RESTProtocol()
        // The grant (a password, a refresh token, a code) goes to this server only: a redirect
        // to another origin is refused, not followed with the form (RFC 6749 §10.4, §10.3).
        endpoint.staysOnOrigin = true
        return endpoint
    }

    /// The request revoking `token` (RFC 7009 §2.1), or `nil` without a revocation endpoint.
    public func revocation(of token: String, hint: String) -> Endpoint<Data>? {
        guard let url = self.revocationURL else { return nil }
        var endpoint = Endpoint<Data>(
            name: "oauth2.revoke", method: .post, path: url.absoluteString, headers: [.accept: "application/json"], decoding: .data
        )
        self.authenticate(&endpoint, fields: [.init(name: "token", value: token), .init(name: "token_type_hint", value: hint)])
        endpoint.deduplication = .disabled
        endpoint.wire = RESTProtocol()
        endpoint.staysOnOrigin = true
        return endpoint
    }

    /// Client authentication (RFC 6749 §2.3): HTTP Basic with a secret, else `client_id` in the form.
    private func authenticate<Value>(_ endpoint: inout Endpoint<Value>, fields: [URLQueryItem]) {
        var fields = fields
        if let secret = self.clientSecret {
            let credentials = Data("\(FormEncoding.escape(self.clientID)):\(FormEncoding.escape(secret))".utf8).base64EncodedString()
            endpoint.headers[.authorization] = "Basic \(credentials)"
        } else {
            fields.append(.init(name: "client_id", value: self.clientID))
        }
        endpoint.body = .form(fields)
    }

    // The field names are the JSON keys of RFC 6749 §5.1.
    // swift-format-ignore: AlwaysUseLowerCamelCase
    private struct TokenResponse: Decodable {
        var access_token: String
        var token_type: String?
        var expires_in: Double?
        var refresh_token: String?
        var scope: String?

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            self.access_token = try container.decode(String.self, forKey: .access_token)
            self.token_type = try container.decodeIfPresent(String.self, forKey: .token_type)
            // A number (RFC 6749 §5.1); servers that send it as a string of digits are read too,
            // and anything else is no lifetime, never a failed refresh that loses a rotated token.
            if let seconds = try? container.decodeIfPresent(Double.self, forKey: .expires_in) {
                self.expires_in = seconds
            } else if let text = try? container.decodeIfPresent(String.self, forKey: .expires_in) {
                self.expires_in = Double(text.trimmingCharacters(in: .whitespaces)).flatMap { $0.isFinite ? $0 : nil }
            } else {
                self.expires_in = nil
            }
            // An empty refresh token is none (RFC 6749 Appendix A.17: 1*VSCHAR): the one held is
            // kept (§6), never replaced by one that can only fail.
            self.refresh_token = try container.decodeIfPresent(String.self, forKey: .refresh_token).flatMap { $0.isEmpty ? nil : $0 }
            // A string (RFC 6749 §3.3); a server that sends a list, or anything else, is read as
            // no scope, never a failed refresh that loses a rotated refresh token.
            self.scope = try? container.decodeIfPresent(String.self, forKey: .scope)
        }

        enum CodingKeys: String, CodingKey {
            case access_token, token_type, expires_in, refresh_token, scope
        }
    }

    package static func decodeToken(_ body: Data) throws -> OAuth2Token {
        let response = try JSONDecoder().decode(TokenResponse.self, from: body)
        // RFC 6749 Appendix A.12: an access token is 1*VSCHAR. An empty one, or one with a line
        // break or other control character, could only be sent as a broken Authorization field.
        guard !response.access_token.isEmpty, response.access_token.utf8.allSatisfy({ (0x20...0x7E).contains($0) }) else {
            throw CourierError(.decoding, "the token endpoint issued an access token that is empty or not printable ASCII")
        }
        // RFC 6749 §7.1: a client must not use a token whose type it does not understand; the
        // type is compared without regard to case (§5.1). Courier sends Bearer tokens (RFC 6750).
        if let type = response.token_type, type.lowercased() != "bearer" {
            throw CourierError(
                .decoding, "the token endpoint issued a token of type \"\(type)\", which this client cannot use (it sends Bearer tokens)")
        }
        return OAuth2Token(
            accessToken: response.access_token,
            tokenType: response.token_type ?? "Bearer",
            refreshToken: response.refresh_token,
            // A lifetime under a second tells nothing usable (the token would be refreshed before
            // every request): taken as none given (RFC 6749 §5.1: it is optional, in seconds), so
            // a 401 says when the token has expired. A huge one is 2^31 seconds (as delta-seconds are).
            expiresAt: response.expires_in.flatMap {
                $0 >= 1 ? UntrustedNumber.clamp($0, to: TimeInterval(UntrustedNumber.deltaSecondsLimit)) : nil
            }
            .map { Date().addingTimeInterval($0) },
            scope: response.scope
        )
    }

    /// The `error` of a failed token response (RFC 6749 §5.2), such as `invalid_grant`.
    static func errorCode(of error: CourierError) -> String? {
        guard error.kind == .httpStatus, let body = error.body,
            let object = try? JSONDecoder().decode([String: JSONValue].self, from: body)
        else { return nil }
        return object["error"]?.stringValue
    }
}
