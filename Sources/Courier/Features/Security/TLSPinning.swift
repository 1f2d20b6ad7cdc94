import Crypto
import Foundation

/// One trusted identity for a pinned host: a public key or a certificate authority.
public struct TLSPin: Sendable, Hashable {
    enum Kind: Sendable, Hashable {
        case publicKeySHA256(Data)
        case anchorPEM(String)
    }

    let kind: Kind

    /// A SubjectPublicKeyInfo pin: the SHA-256 of the DER-encoded SPKI of the server's leaf certificate.
    public static func publicKey(spkiSHA256: Data) -> TLSPin {
        TLSPin(kind: .publicKeySHA256(spkiSHA256))
    }

    /// A public-key pin written as `sha256/BASE64` (the HPKP and curl notation).
    ///
    /// - Throws: ``CourierError`` of kind `invalidRequest` if the text is not a SHA-256 digest in base64.
    public static func publicKey(_ text: String) throws -> TLSPin {
        let base64 = text.hasPrefix("sha256/") ? String(text.dropFirst("sha256/".count)) : text
        guard let digest = Data(base64Encoded: base64), digest.count == SHA256.byteCount else {
            throw CourierError.invalidRequest("'\(text)' is not a pin of the form sha256/BASE64 (a 32-byte SHA-256 digest)")
        }
        return .publicKey(spkiSHA256: digest)
    }

    /// A certificate or certificate-authority pin: only chains ending at this certificate (PEM) are trusted.
    public static func certificateAuthority(pem: String) -> TLSPin {
        TLSPin(kind: .anchorPEM(pem))
    }

    /// The `sha256/BASE64` text of a public-key pin computed from a DER SubjectPublicKeyInfo.
    public static func publicKeyPinText(spkiDER: Data) -> String {
        "sha256/" + Data(SHA256.hash(data: spkiDER)).base64EncodedString()
    }
}

/// Which hosts are pinned to which identities; several pins per host allow a backup key.
///
/// ```swift
/// var pinning = PinningPolicy()
/// try pinning.pin("api.example.com", to: [.publicKey("sha256/current…="), .publicKey("sha256/backup…=")])
/// ```
///
/// A pinned host must be reached over https. Host names are matched case-insensitively; a pin for
/// `*.example.com` covers one label below `example.com`.
public struct PinningPolicy: Sendable, Hashable {
    /// The pins by host (lower-cased).
    public private(set) var pins: [String: Set<TLSPin>] = [:]

    /// Creates an empty policy (nothing pinned).
    public init() {}

    /// Adds pins for a host.
    public mutating func pin(_ host: String, to pins: [TLSPin]) {
        self.pins[host.lowercased(), default: []].formUnion(pins)
    }

    /// Whether nothing is pinned.
    public var isEmpty: Bool { self.pins.isEmpty }

    /// Whether some host has a public-key pin.
    public var hasPublicKeyPins: Bool {
        self.pins.values.contains { pins in pins.contains { if case .publicKeySHA256 = $0.kind { return true } else { return false } } }
    }

    /// The pins that apply to `host`, if it is pinned.
    public func pins(for host: String) -> Set<TLSPin>? {
        let host = host.lowercased()
        if let exact = self.pins[host] { return exact }
        for (pattern, pins) in self.pins where pattern.hasPrefix("*.") {
            let suffix = pattern.dropFirst(1)
            if host.hasSuffix(suffix), !host.dropLast(suffix.count).contains("."), host.count > suffix.count { return pins }
        }
        return nil
    }

    /// The public-key digests pinned for `host`.
    public func publicKeyDigests(for host: String) -> Set<Data> {
        Set((self.pins(for: host) ?? []).compactMap { if case .publicKeySHA256(let digest) = $0.kind { return digest } else { return nil } })
    }

    /// The anchors (PEM) pinned for `host`.
    public func anchors(for host: String) -> [String] {
        (self.pins(for: host) ?? []).compactMap { if case .anchorPEM(let pem) = $0.kind { return pem } else { return nil } }.sorted()
    }
}
