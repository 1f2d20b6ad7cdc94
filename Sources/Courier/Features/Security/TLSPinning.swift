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
/// pinning.pin("api.example.com:8443", to: [.publicKey(spkiSHA256: otherKey)])   // that port only
/// ```
///
/// A pinned host must be reached over https. Host names are matched case-insensitively; a pin for
/// `*.example.com` covers one label below `example.com`. A pin may name a port (`host:port`,
/// `[::1]:8443`): it then applies to that port only, and takes the place of a pin for the host
/// without a port there. IPv6 addresses are compared in their canonical form (RFC 5952), with or
/// without brackets.
public struct PinningPolicy: Sendable, Hashable {
    /// The pins by host, or by `host:port` (lower-cased, IPv6 addresses canonical).
    public private(set) var pins: [String: Set<TLSPin>] = [:]

    /// Creates an empty policy (nothing pinned).
    public init() {}

    /// Adds pins for a host (`host`, `host:port`, `*.domain`, an IPv4 or IPv6 address).
    ///
    /// A host pinned to an empty list (pins that all failed to load, say) is pinned to nothing:
    /// no certificate is accepted for it, rather than any — nor, on AsyncHTTPClient, a
    /// certificate that also names it when another host presents it (a wildcard certificate
    /// shared with an unpinned sibling host).
    public mutating func pin(_ host: String, to pins: [TLSPin]) {
        let (name, port) = Self.split(host)
        self.pins[Self.key(name, port: port), default: []].formUnion(pins)
    }

    /// Whether nothing is pinned.
    public var isEmpty: Bool { self.pins.isEmpty }

    /// Whether some host has a public-key pin.
    public var hasPublicKeyPins: Bool {
        self.pins.values.contains { pins in pins.contains { if case .publicKeySHA256 = $0.kind { return true } else { return false } } }
    }

    /// Whether a certificate's public key must be checked: some host has a public-key pin, or is
    /// pinned to nothing (which no key matches).
    package var checksPublicKeys: Bool {
        self.hasPublicKeyPins || self.pins.values.contains { $0.isEmpty }
    }

    /// The pins that apply to `host` on `port` (any port when `nil`), if it is pinned.
    public func pins(for host: String, port: Int? = nil) -> Set<TLSPin>? {
        self.matchingKey(for: host, port: port).flatMap { self.pins[$0] }
    }

    /// The key of ``pins`` that applies to `host` on `port`: `host:port`, then `host`, then a
    /// wildcard with the port, then a wildcard without one.
    package func matchingKey(for host: String, port: Int?) -> String? {
        let name = Self.canonicalHost(host)
        if let port, self.pins[Self.key(name, port: port)] != nil { return Self.key(name, port: port) }
        if self.pins[name] != nil { return name }
        var wildcard: String?
        for key in self.pins.keys {
            let (pattern, keyPort) = Self.split(key)
            guard pattern.hasPrefix("*."), keyPort == nil || keyPort == port else { continue }
            let suffix = pattern.dropFirst(1)
            guard name.hasSuffix(suffix), !name.dropLast(suffix.count).contains("."), name.count > suffix.count else { continue }
            if keyPort != nil { return key }
            wildcard = key
        }
        return wildcard
    }

    /// The keys of ``pins`` to enforce on a certificate valid for `names` (its subjectAltName
    /// entries, lower-cased; `*.domain` for a wildcard), on a connection to `port`: for each host
    /// the certificate names, the key ``matchingKey(for:port:)`` picks for it, sorted.
    ///
    /// A wildcard name stands for the pinned hosts it covers, and for a host under it that no
    /// exact pin names (which only a wildcard pin can cover) — unless one of the exact hosts it
    /// covers has its keys pinned: then, as for a request, that host's pin takes the place of
    /// the wildcard pin (a certificate for `*.example.com` with a key pinned for
    /// `api.example.com` passes, whatever `*.example.com` is pinned to), and the certificate's
    /// key must be one of its. An exact host pinned to an authority only checks no key, and
    /// takes the place of nothing.
    package func keysToEnforce(forCertificateNames names: [String], port: Int?) -> [String] {
        var hosts: Set<String> = []
        for name in names {
            let name = Self.canonicalHost(name)
            guard name.hasPrefix("*.") else {
                hosts.insert(name)
                continue
            }
            let suffix = name.dropFirst(1)
            var coveredByKeyPins = false
            for (key, pins) in self.pins {
                let (host, _) = Self.split(key)
                guard !host.hasPrefix("*."), host.hasSuffix(suffix), host.count > suffix.count,
                    !host.dropLast(suffix.count).contains(".")
                else { continue }
                hosts.insert(host)
                if Self.checksKeys(pins) { coveredByKeyPins = true }
            }
            // A label no pin names, under the wildcard's domain.
            if !coveredByKeyPins { hosts.insert("courier-unpinned-label" + suffix) }
        }
        return Set(hosts.compactMap { self.matchingKey(for: $0, port: port) }).sorted()
    }

    /// Whether pins check a certificate's key: some are public keys, or there are none (which
    /// accept no key).
    package static func checksKeys(_ pins: Set<TLSPin>) -> Bool {
        pins.isEmpty || !Self.publicKeyDigests(in: pins).isEmpty
    }

    /// The public-key digests pinned for `host` on `port`.
    public func publicKeyDigests(for host: String, port: Int? = nil) -> Set<Data> {
        Self.publicKeyDigests(in: self.pins(for: host, port: port) ?? [])
    }

    /// The anchors (PEM) pinned for `host` on `port`.
    public func anchors(for host: String, port: Int? = nil) -> [String] {
        Self.anchors(in: self.pins(for: host, port: port) ?? [])
    }

    /// The public-key digests among `pins`.
    package static func publicKeyDigests(in pins: Set<TLSPin>) -> Set<Data> {
        Set(pins.compactMap { if case .publicKeySHA256(let digest) = $0.kind { return digest } else { return nil } })
    }

    /// The anchors (PEM) among `pins`, sorted.
    package static func anchors(in pins: Set<TLSPin>) -> [String] {
        pins.compactMap { if case .anchorPEM(let pem) = $0.kind { return pem } else { return nil } }.sorted()
    }

    /// A key of ``pins`` split into its host and port (`nil` for any port).
    package static func split(_ key: String) -> (host: String, port: Int?) {
        if key.hasPrefix("["), let close = key.firstIndex(of: "]") {
            let host = Self.canonicalHost(String(key[key.index(after: key.startIndex)..<close]))
            let rest = key[key.index(after: close)...]
            if rest.first == ":", let port = Int(rest.dropFirst()), (0...65535).contains(port) { return (host, port) }
            return (host, nil)
        }
        if key.filter({ $0 == ":" }).count == 1, let colon = key.lastIndex(of: ":"),
            let port = Int(key[key.index(after: colon)...]), (0...65535).contains(port)
        {
            return (Self.canonicalHost(String(key[..<colon])), port)
        }
        return (Self.canonicalHost(key), nil)
    }

    /// The key of ``pins`` for a canonical host on a port (any port when `nil`).
    package static func key(_ host: String, port: Int?) -> String {
        guard let port else { return host }
        return host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
    }

    /// A host name lower-cased and without a trailing dot (`api.example.com.` is the same host
    /// written as an absolute name, RFC 1034 §3.1), in its IDNA form when written in Unicode
    /// (`bücher.example` is `xn--bcher-kva.example`, the name requests go to), or an IPv6
    /// address (with or without brackets) in its canonical text form (RFC 5952: `::1`, not
    /// `0:0:0:0:0:0:0:1`).
    package static func canonicalHost(_ host: String) -> String {
        var host = Self.asciiHost(host).lowercased()
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        guard host.contains(":") else {
            if host.utf8.count > 1, host.utf8.last == UInt8(ascii: ".") { host.removeLast() }
            return host
        }
        var address = in6_addr()
        guard inet_pton(AF_INET6, host, &address) == 1 else { return host }
        return Self.ipv6Text(withUnsafeBytes(of: &address) { Array($0) }) ?? host
    }

    /// A host name written in Unicode in its IDNA (`xn--`) form, as a base URL's host goes on the
    /// wire (RFC 3986 §3.2.2); any other name as it is.
    package static func asciiHost(_ host: String) -> String {
        guard host.utf8.contains(where: { $0 >= 0x80 }) else { return host }
        var components = URLComponents()
        components.host = host
        return components.encodedHost ?? host
    }

    /// The canonical text of a 16-byte IPv6 address.
    package static func ipv6Text(_ bytes: [UInt8]) -> String? {
        guard bytes.count == 16 else { return nil }
        var address = in6_addr()
        withUnsafeMutableBytes(of: &address) { $0.copyBytes(from: bytes) }
        var buffer = [CChar](repeating: 0, count: 64)
        guard inet_ntop(AF_INET6, &address, &buffer, socklen_t(buffer.count)) != nil else { return nil }
        let length = buffer.firstIndex(of: 0) ?? buffer.count
        return String(decoding: buffer[..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
