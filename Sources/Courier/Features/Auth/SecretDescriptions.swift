import Foundation

/// How a secret is shown by the descriptions below: never its text, only that there is one.
private let hidden = Redactor.standard.replacement

// The credential types describe themselves, mirror themselves (`dump`) and print in a debugger
// without their secrets: an app that logs a token set, an endpoint or a grant (`"\(token)"`,
// `print(grant)`) leaks nothing through it. The values stay readable through their properties.
// Each type's mirror says what is shown; its description is made from the mirror.

/// `Name(label: value, …)` of a mirror's children; an optional without a value is left out.
private func described(_ mirror: Mirror, as name: String) -> String {
    let parts = mirror.children.compactMap { child -> String? in
        guard let label = child.label else { return nil }
        let value = Mirror(reflecting: child.value)
        guard value.displayStyle == .optional else { return "\(label): \(child.value)" }
        return value.children.first.map { "\(label): \($0.value)" }
    }
    return "\(name)(\(parts.joined(separator: ", ")))"
}

extension OAuth2Token: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// The token set with its access and refresh tokens hidden.
    public var description: String { described(self.customMirror, as: "OAuth2Token") }

    /// The token set with its access and refresh tokens hidden, as ``description``.
    public var debugDescription: String { self.description }

    /// The token set's parts for `dump` and debuggers, its tokens hidden.
    public var customMirror: Mirror {
        Mirror(
            self,
            children: [
                "tokenType": self.tokenType, "accessToken": hidden, "refreshToken": self.refreshToken.map { _ in hidden } as Any,
                "expiresAt": self.expiresAt as Any, "scope": self.scope as Any,
            ], displayStyle: .struct)
    }
}

extension OAuth2TokenEndpoint: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// The endpoint with its client secret hidden.
    public var description: String { described(self.customMirror, as: "OAuth2TokenEndpoint") }

    /// The endpoint with its client secret hidden, as ``description``.
    public var debugDescription: String { self.description }

    /// The endpoint's parts for `dump` and debuggers, its client secret hidden.
    public var customMirror: Mirror {
        Mirror(
            self,
            children: [
                "url": Redactor.standard.redact(urlString: self.url.absoluteString), "clientID": self.clientID,
                "clientSecret": self.clientSecret.map { _ in hidden } as Any,
                "revocationURL": self.revocationURL.map { Redactor.standard.redact(urlString: $0.absoluteString) } as Any,
            ], displayStyle: .struct)
    }
}

extension OAuth2TokenEndpoint.Grant: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// The grant with its password, refresh token, code and code verifier hidden.
    public var description: String {
        switch self {
        case .password(let username, _, let scope):
            return "password(username: \(username), password: \(hidden)\(scope.map { ", scope: \($0)" } ?? ""))"
        case .clientCredentials(let scope):
            return "clientCredentials(\(scope.map { "scope: \($0)" } ?? ""))"
        case .refreshToken:
            return "refreshToken(\(hidden))"
        case .authorizationCode(_, let redirectURI, _):
            return "authorizationCode(code: \(hidden), redirectURI: \(redirectURI), codeVerifier: \(hidden))"
        }
    }

    /// The grant with its secrets hidden, as ``description``.
    public var debugDescription: String { self.description }

    /// The grant for `dump` and debuggers: its description alone.
    public var customMirror: Mirror { Mirror(self, children: ["grant": self.description], displayStyle: .enum) }
}

extension OAuth2AuthorizationRequest: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// The request with its PKCE code verifier hidden.
    public var description: String { described(self.customMirror, as: "OAuth2AuthorizationRequest") }

    /// The request with its code verifier hidden, as ``description``.
    public var debugDescription: String { self.description }

    /// The request's parts for `dump` and debuggers, its code verifier hidden.
    public var customMirror: Mirror {
        Mirror(
            self, children: ["url": self.url, "state": self.state, "codeVerifier": hidden, "redirectURI": self.redirectURI],
            displayStyle: .struct)
    }
}
