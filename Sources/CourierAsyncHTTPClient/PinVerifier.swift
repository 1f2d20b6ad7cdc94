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
///
/// It also refuses a leaf certificate that names no DNS name or IP address in a
/// subjectAltName: the TLS library would otherwise accept it for a host that matches its Common
/// Name, which RFC 6125 §6.4.4 leaves to legacy clients and RFC 9110 §4.3.4 does not allow.
///
/// Pins that name a port apply only when the connection's remote port is that port.
///
/// With hostname verification off (certificate verification `.none` or `.noHostnameVerification`)
/// the names of a leaf prove nothing: a man in the middle presents a certificate for another
/// name, for which no pin applies. Then a leaf that names no pinned host must carry a key
/// pinned for some host — with verification off, the pins are the only check.
struct PinVerifier: Sendable {
    let policy: PinningPolicy
    let requiresSubjectAlternativeName: Bool
    /// Whether the TLS library checked that the leaf is valid for the host connected to.
    let hostnameVerified: Bool
    /// Whether the event loops may run TLS inside the channel, out of sight (a group other than
    /// SwiftNIO's POSIX one: Network.framework's, on Apple platforms).
    var tlsMayBeHidden = false

    func verify(_ channel: any Channel) -> EventLoopFuture<Void> {
        let port = channel.remoteAddress?.port
        // A clear-text connection has no TLS handler (pinned hosts are refused over http before
        // anything is sent): nothing to check.
        return channel.pipeline.handler(type: NIOSSLClientHandler.self).flatMap { _ in
            channel.nioSSL_peerCertificate().flatMapThrowing { leaf in
                guard let leaf else { return }
                try self.check(leaf, port: port)
            }
        }.flatMapError { error in
            if let pipelineError = error as? ChannelPipelineError, pipelineError == .notFound {
                // With Network.framework event loops TLS runs inside the channel, without a
                // NIOSSL handler, and no certificate can be read here: fail closed when keys are
                // pinned. (SwiftNIO's POSIX loops, the default everywhere, are not such loops: a
                // connection without the handler there is clear text.)
                if self.tlsMayBeHidden, self.policy.checksPublicKeys {
                    return channel.eventLoop.makeFailedFuture(error)
                }
                return channel.eventLoop.makeSucceededVoidFuture()
            }
            return channel.eventLoop.makeFailedFuture(error)
        }
    }

    func check(_ leaf: NIOSSLCertificate, port: Int?) throws {
        let certificate = try Certificate(derEncoded: try leaf.toDERBytes())
        let names = Self.names(of: certificate)
        if self.requiresSubjectAlternativeName, names.isEmpty {
            throw NoSubjectAlternativeName(subject: certificate.subject.description)
        }
        guard self.policy.checksPublicKeys else { return }
        let digest = Data(SHA256.hash(data: try leaf.extractPublicKey().toSPKIBytes()))
        // For each host the leaf is valid for, the pins the transport would pick for a request
        // to it (host and this port, host, wildcard and this port, wildcard: a pin for this port
        // takes the place of the host's pin, an exact host the place of a wildcard); every one
        // of them is enforced. (Ranking the entries of all hosts together let a sibling host's
        // pin outrank this host's own: a certificate naming it and a host pinned to an authority
        // only was accepted with any key.)
        let keys = self.policy.keysToEnforce(forCertificateNames: names, port: port)
        guard !keys.isEmpty else {
            if self.hostnameVerified { return }
            let anyPinned = self.policy.pins.values.reduce(into: Set<Data>()) { $0.formUnion(PinningPolicy.publicKeyDigests(in: $1)) }
            guard anyPinned.contains(digest) else {
                throw PinMismatch(
                    host: "a host whose name the certificate does not prove (hostname verification is off)",
                    presented: "sha256/" + digest.base64EncodedString())
            }
            return
        }
        for key in keys {
            let pins = self.policy.pins[key] ?? []
            let pinned = PinningPolicy.publicKeyDigests(in: pins)
            // A host pinned to nothing accepts no key; one with only authority pins, any key.
            guard (pinned.isEmpty && !pins.isEmpty) || pinned.contains(digest) else {
                throw PinMismatch(host: key, presented: "sha256/" + digest.base64EncodedString())
            }
        }
    }

    /// The DNS names and IP addresses (IPv4 dotted, IPv6 canonical) of a certificate's
    /// subjectAltName, lower-cased.
    static func names(of certificate: Certificate) -> [String] {
        var names: [String] = []
        if let alternatives = try? certificate.extensions.subjectAlternativeNames {
            for name in alternatives {
                switch name {
                case .dnsName(let dns): names.append(dns.lowercased())
                case .ipAddress(let bytes):
                    let octets = Array(bytes.bytes)
                    if octets.count == 4 {
                        names.append(octets.map(String.init).joined(separator: "."))
                    } else if let text = PinningPolicy.ipv6Text(octets) {
                        names.append(text)
                    }
                default: break
                }
            }
        }
        return names
    }
}

/// The server's leaf certificate names no host in a subjectAltName.
struct NoSubjectAlternativeName: Error, CustomStringConvertible {
    let subject: String

    var description: String {
        "the server's certificate (\(self.subject)) names no DNS name or IP address in a subjectAltName; a Common Name alone is not accepted (RFC 6125 §6.4.4)"
    }
}

/// The server's certificate did not carry a pinned public key.
struct PinMismatch: Error, CustomStringConvertible {
    let host: String
    let presented: String

    var description: String { "the certificate presented for \(self.host) has public key \(self.presented), which is not pinned" }
}
