import Foundation
import HTTPTypes

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// How the platform's errors and response fields become Courier's.
extension URLSessionTransport {
    package static func mapError(_ error: any Error) -> CourierError {
        let nsError = error as NSError
        guard nsError.domain == NSURLErrorDomain else { return .transport(String(describing: error), underlying: error) }
        switch nsError.code {
        case NSURLErrorCancelled: return .cancelled(underlying: error)
        case NSURLErrorTimedOut: return .timeout(underlying: error)
        case NSURLErrorServerCertificateUntrusted, NSURLErrorServerCertificateHasBadDate, NSURLErrorServerCertificateHasUnknownRoot,
            NSURLErrorServerCertificateNotYetValid, NSURLErrorSecureConnectionFailed, NSURLErrorClientCertificateRejected,
            NSURLErrorClientCertificateRequired:
            let reason = Self.tlsReason(nsError)
            var mapped = CourierError(
                .tls,
                TransportRules.tlsMessage(reason, platformText: nsError.localizedDescription),
                underlying: error)
            mapped.tlsReason = reason
            return mapped
        case NSURLErrorNetworkConnectionLost, NSURLErrorCannotConnectToHost, NSURLErrorCannotFindHost, NSURLErrorDNSLookupFailed,
            NSURLErrorNotConnectedToInternet:
            var mapped = CourierError.transport(
                nsError.code == NSURLErrorNetworkConnectionLost
                    ? "the connection was closed before the response completed" : nsError.localizedDescription,
                underlying: error)
            mapped.couldNotConnect = true
            return mapped
        case NSURLErrorCannotDecodeContentData, NSURLErrorCannotDecodeRawData:
            // Apple platforms decode gzip, deflate and br themselves and fail a body they cannot
            // decode with these codes: the same failure as on the other transport.
            return CourierError(
                .decoding, "the response's content coding could not be decoded (\(nsError.localizedDescription))", underlying: error)
        case NSURLErrorBadServerResponse where Self.texts(of: nsError).contains("Empty reply from server"):
            // libcurl's "empty reply" (FoundationNetworking's bad server response): the server
            // closed the connection before any byte of a response.
            var mapped = CourierError.transport("the connection was closed before any byte of a response", underlying: error)
            mapped.couldNotConnect = true
            return mapped
        case NSURLErrorUnsupportedURL where Self.isMalformedResponseText(nsError):
            // libcurl refuses a status line it cannot take (`HTTP/1.1 099`: "Unsupported response
            // code in HTTP response"; `HTTP/1.2`: "Unsupported HTTP version (1.2) in response")
            // as an unsupported protocol, which FoundationNetworking reports as an unsupported
            // URL: the server's fault, not the request's.
            return CourierError.transport("the server sent a malformed status line (\(Self.texts(of: nsError)))", underlying: error)
        case NSURLErrorBadURL, NSURLErrorUnsupportedURL:
            // Nothing was sent. FoundationNetworking on Linux refuses a host written as an IPv6
            // literal (`http://[::1]:8080/`) this way although the URL is well formed.
            var message = "the platform's URL loading refused this URL (\(nsError.code == NSURLErrorBadURL ? "bad" : "unsupported") URL)"
            #if os(Linux)
            message += "; on Linux URLSession refuses IPv6 literal hosts: use AsyncHTTPClientTransport for them"
            #endif
            return CourierError(.invalidRequest, message, underlying: error)
        default:
            // FoundationNetworking passes most libcurl TLS failures on as NSURLErrorUnknown with
            // libcurl's text ("SSL certificate problem: …"): still a TLS failure, never `transport`.
            // libcurl decodes gzip and deflate itself on Linux; a body it cannot decode is the
            // same failure as on the other transport: kind `decoding`, not `transport`.
            if Self.isContentCodingText(nsError) {
                return CourierError(
                    .decoding, "the response's content coding could not be decoded (\(nsError.localizedDescription))", underlying: error)
            }
            if Self.isTLSText(nsError) {
                let reason = Self.tlsReason(nsError)
                var mapped = CourierError(
                    .tls,
                    TransportRules.tlsMessage(reason, platformText: nsError.localizedDescription),
                    underlying: error)
                mapped.tlsReason = reason
                return mapped
            }
            return .transport(nsError.localizedDescription, underlying: error)
        }
    }
}

extension URLSessionTransport {
    /// Why a TLS connection failed, from what the platform says: the error code where it is
    /// specific (`…HasBadDate`, `…NotYetValid`, `…HasUnknownRoot`), else the Secure Transport
    /// status Apple platforms attach, else libcurl's wording (FoundationNetworking on Linux);
    /// `nil` when none of them tells.
    /// Whether libcurl's text says the failure is TLS's: a certificate problem, a failed TLS
    /// connect, or OpenSSL's own error.
    static func isTLSText(_ error: NSError) -> Bool {
        let text = Self.texts(of: error).lowercased()
        return [
            "ssl certificate problem", "ssl: ", "ssl_connect", "ssl routines", "ssl connect error", "tls connect error",
            "ssl peer certificate",
        ]
        .contains { text.contains($0) }
    }

    /// The `Set-Cookie` values the platform joined with ", ": split at a comma and a space followed
    /// by a new `name=value` (not at the comma inside an `Expires` date such as `Wed, 09 Jun 2021`,
    /// nor at a comma the server wrote inside one field's value, `b=2,c=3`: one cookie, as
    /// AsyncHTTPClient reads it — RFC 6265 §3, a server sends one cookie per field). Read byte by
    /// byte (``FieldText``).
    static func splitSetCookie(_ joined: String) -> [String] {
        var values: [String] = []
        var current = ""
        for (index, piece) in FieldText.split(joined, at: ",").enumerated() {
            if index > 0 {
                // A new cookie starts when the piece opens with a `name=` (no space or `;` in the name).
                let nextToken = FieldText.split(FieldText.split(piece, at: ";", maxSplits: 1)[0], at: "=", maxSplits: 1)
                let name = nextToken.count == 2 ? FieldText.trimmed(nextToken[0]) : ""
                if piece.utf8.first == 0x20, !name.isEmpty, !name.utf8.contains(0x20) {
                    values.append(FieldText.trimmed(current))
                    current = ""
                } else {
                    current += ","
                }
            }
            current += piece
        }
        let last = FieldText.trimmed(current)
        if !last.isEmpty { values.append(last) }
        return values
    }

    /// Whether libcurl's text says the body's content coding could not be decoded (corrupt
    /// data, or a coding it does not know).
    static func isContentCodingText(_ error: NSError) -> Bool {
        let text = Self.texts(of: error).lowercased()
        return ["error while processing content unencoding", "unrecognized or bad http content or transfer-encoding"].contains {
            text.contains($0)
        }
    }

    /// Whether libcurl's text says the response could not be read: a status code or an HTTP
    /// version it does not take, or no status line at all (an answer that is not HTTP, which
    /// libcurl calls HTTP/0.9; the wording differs between libcurl versions).
    static func isMalformedResponseText(_ error: NSError) -> Bool {
        let text = Self.texts(of: error).lowercased()
        return ["in http response", "unsupported http version", "http/1 subversion", "http/0.9"].contains { text.contains($0) }
    }

    /// The error's description and those of the errors and strings in its user info, but for
    /// the failing URL (whose query may hold a key or a signature: a message is free of secrets).
    private static func texts(of error: NSError) -> String {
        var texts = [error.localizedDescription]
        for (key, value) in error.userInfo where !Self.failingURLKeys.contains(key) {
            if let text = value as? String { texts.append(text) }
            if let inner = value as? NSError { texts.append(inner.localizedDescription) }
        }
        return texts.joined(separator: " ")
    }

    /// The user-info keys under which the platform puts the URL of the request that failed.
    private static let failingURLKeys: Set<String> = ["NSErrorFailingURLStringKey", "NSErrorFailingURLKey"]

    static func tlsReason(_ error: NSError) -> TLSFailureReason? {
        switch error.code {
        case NSURLErrorServerCertificateHasBadDate: return .expired
        case NSURLErrorServerCertificateNotYetValid: return .notYetValid
        case NSURLErrorServerCertificateHasUnknownRoot: return .untrustedIssuer
        case NSURLErrorClientCertificateRejected, NSURLErrorClientCertificateRequired: return .handshakeFailure
        default: break
        }
        // Secure Transport statuses (SecureTransport.h): errSSLCertExpired, errSSLCertNotYetValid,
        // errSSLXCertChainInvalid, errSSLUnknownRootCert, errSSLNoRootCert, errSSLHostNameMismatch.
        if let status = error.userInfo["_kCFStreamErrorCodeKey"] as? Int {
            switch status {
            case -9814: return .expired
            case -9815: return .notYetValid
            case -9807, -9812, -9813: return .untrustedIssuer
            case -9843: return .hostnameMismatch
            default: break
            }
        }
        let text = Self.texts(of: error).lowercased()
        let wordings: [(String, TLSFailureReason)] = [
            ("certificate has expired", .expired), ("certificate is not yet valid", .notYetValid),
            ("self-signed certificate", .untrustedIssuer), ("self signed certificate", .untrustedIssuer),
            ("unable to get local issuer certificate", .untrustedIssuer), ("unable to get issuer certificate", .untrustedIssuer),
            ("no alternative certificate subject name matches", .hostnameMismatch), ("does not match target host name", .hostnameMismatch),
        ]
        if let match = wordings.first(where: { text.contains($0.0) }) { return match.1 }
        if error.code == NSURLErrorSecureConnectionFailed { return .handshakeFailure }
        // libcurl's other TLS failures: a failed connect, OpenSSL's own errors.
        if ["ssl_connect", "ssl routines", "ssl connect error", "tls connect error"].contains(where: { text.contains($0) }) {
            return .handshakeFailure
        }
        return nil
    }
}
