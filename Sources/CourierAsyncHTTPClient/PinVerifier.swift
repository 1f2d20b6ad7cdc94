import Courier
import Crypto
import Foundation
import NIOCore
import NIOSSL
import X509

/// Enforces public-key pins on every new TLS connection, after the handshake and before the pool
/// hands the connection to any request.
///
/// AsyncHTTPClient has no per-connection verification callback, but it runs its connection debug
/// initializers on each new connection once TLS and ALPN are done, and a failed initializer keeps
/// the connection out of the pool and fails the waiting request (with connection retries off).
/// The initializer does not know which host the connection is for, so the check goes the other
/// way: for every pinned host the leaf certificate is valid for (by its subject alternative
/// names; hostname verification stays on and already matched the real host), the leaf's public
/// key must be one of that host's pins. A certificate for the pinned host with any other key — a
/// man in the middle with a CA the system trusts — fails here, before a byte of HTTP is written.
struct PinVerifier: Sendable {
    let policy: PinningPolicy

    func verify(_ channel: any Channel) -> EventLoopFuture<Void> {
        channel.nioSSL_peerCertificate().flatMapThrowing { leaf in
            guard let leaf else { return }  // not TLS: pinned hosts are refused over http before sending
            try self.check(leaf)
        }
    }

    func check(_ leaf: NIOSSLCertificate) throws {
        let certificate = try Certificate(derEncoded: try leaf.toDERBytes())
        let names = Self.names(of: certificate)
        let digest = Data(SHA256.hash(data: try leaf.extractPublicKey().toSPKIBytes()))
        for host in self.policy.pins.keys where names.contains(where: { Self.matches(pattern: $0, host: host) }) {
            let pinned = self.policy.publicKeyDigests(for: host)
            guard pinned.isEmpty || pinned.contains(digest) else {
                throw PinMismatch(host: host, presented: "sha256/" + digest.base64EncodedString())
            }
        }
    }

    static func names(of certificate: Certificate) -> [String] {
        var names: [String] = []
        if let alternatives = try? certificate.extensions.subjectAlternativeNames {
            for name in alternatives {
                switch name {
                case .dnsName(let dns): names.append(dns.lowercased())
                case .ipAddress(let bytes):
                    let octets = Array(bytes.bytes)
                    if octets.count == 4 { names.append(octets.map(String.init).joined(separator: ".")) }
                default: break
                }
            }
        }
        return names
    }

    /// Whether a certificate name (possibly `*.example.com`) covers a pinned host (possibly a wildcard too).
    static func matches(pattern: String, host: String) -> Bool {
        if pattern == host { return true }
        if pattern.hasPrefix("*."), let dot = host.firstIndex(of: "."), host[dot...] == pattern.dropFirst(1) { return true }
        if host.hasPrefix("*."), let dot = pattern.firstIndex(of: "."), pattern[dot...] == host.dropFirst(1) { return true }
        return false
    }
}

/// The server's certificate did not carry a pinned public key.
struct PinMismatch: Error, CustomStringConvertible {
    let host: String
    let presented: String

    var description: String { "the certificate presented for \(self.host) has public key \(self.presented), which is not pinned" }
}
