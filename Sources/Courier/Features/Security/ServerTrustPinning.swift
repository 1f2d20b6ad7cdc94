import Crypto
import Foundation

/// The pin checks a transport makes once the platform has the server's certificate chain, in
/// pure Swift so that every transport shares them: the SubjectPublicKeyInfo of a DER
/// certificate, the certificates of a PEM text, and the verdict of a host's pins on a leaf.
///
/// `URLSessionTransport` uses them in its server-trust challenge on Apple platforms; the DER and
/// PEM reading is tested on Linux against certificates made at test time.
package enum ServerTrustPinning {
    /// The DER bytes of the SubjectPublicKeyInfo of an X.509 certificate (RFC 5280 §4.1), or
    /// `nil` when `certificate` is not a well-formed DER certificate.
    ///
    /// The certificate is walked, not decoded: `Certificate ::= SEQUENCE { tbsCertificate, … }`,
    /// `TBSCertificate ::= SEQUENCE { [0] version OPTIONAL, serialNumber, signature, issuer,
    /// validity, subject, subjectPublicKeyInfo, … }`; the seventh element (sixth without the
    /// version) is returned whole, tag and length included — the bytes a public-key pin hashes.
    package static func subjectPublicKeyInfo(ofCertificate certificate: Data) -> Data? {
        let bytes = [UInt8](certificate)
        guard let outer = DERElement.read(bytes, at: 0), outer.tag == 0x30, outer.end == bytes.count,
            let tbs = DERElement.read(bytes, at: outer.contentStart, limit: outer.end), tbs.tag == 0x30
        else { return nil }
        var position = tbs.contentStart
        var index = 0
        while position < tbs.end {
            guard let element = DERElement.read(bytes, at: position, limit: tbs.end) else { return nil }
            if index == 0, element.tag == 0xA0 {
                // The explicit version; the fields counted below come after it.
                position = element.end
                continue
            }
            if index == 5 {
                guard element.tag == 0x30 else { return nil }
                return Data(bytes[element.start..<element.end])
            }
            index += 1
            position = element.end
        }
        return nil
    }

    /// The DER certificates in a PEM text (`-----BEGIN CERTIFICATE-----` blocks), in order;
    /// blocks that are not valid base64 are left out.
    package static func certificates(inPEM pem: String) -> [Data] {
        var certificates: [Data] = []
        var body: String?
        for line in pem.split(whereSeparator: \.isNewline) {
            let line = line.trimmingCharacters(in: .whitespaces)
            if line == "-----BEGIN CERTIFICATE-----" {
                body = ""
            } else if line == "-----END CERTIFICATE-----" {
                if let text = body, let der = Data(base64Encoded: text), !der.isEmpty { certificates.append(der) }
                body = nil
            } else if body != nil {
                body! += line
            }
        }
        return certificates
    }

    /// Whether the public-key pins among `pins` accept a leaf certificate: `nil` when they do
    /// (or when `pins` holds other pins but no public-key pin; an empty `pins` accepts none), else the error to fail the request with (kind
    /// and TLS reason `pinMismatch`, naming the key presented).
    package static func verdict(pins: Set<TLSPin>, host: String, leafCertificate: Data?) -> CourierError? {
        let digests = PinningPolicy.publicKeyDigests(in: pins)
        // A host pinned to nothing accepts no key (the pins that were meant failed to load).
        guard !digests.isEmpty || pins.isEmpty else { return nil }
        guard let leaf = leafCertificate, let spki = Self.subjectPublicKeyInfo(ofCertificate: leaf) else {
            return Self.mismatch("the certificate presented for \(host) could not be read, so its public key cannot match a pin")
        }
        let digest = Data(SHA256.hash(data: spki))
        guard digests.contains(digest) else {
            return Self.mismatch(
                "the certificate presented for \(host) has public key sha256/\(digest.base64EncodedString()), which is not pinned")
        }
        return nil
    }

    /// The error for a chain that does not end at one of the host's pinned authorities.
    package static func anchorMismatch(host: String, detail: String) -> CourierError {
        Self.mismatch("the certificate presented for \(host) does not chain to a pinned authority: \(detail)")
    }

    private static func mismatch(_ message: String) -> CourierError {
        var error = CourierError(.pinMismatch, message)
        error.tlsReason = .pinMismatch
        return error
    }
}

/// One DER tag-length-value element: where it starts, where its content starts, where it ends.
private struct DERElement {
    let tag: UInt8
    let start: Int
    let contentStart: Int
    let end: Int

    /// Reads the element at `position`, refusing lengths that run past `limit` (or the bytes),
    /// indefinite lengths (not DER) and length fields longer than four bytes.
    static func read(_ bytes: [UInt8], at position: Int, limit: Int? = nil) -> DERElement? {
        let limit = min(limit ?? bytes.count, bytes.count)
        guard position >= 0, position + 2 <= limit else { return nil }
        let tag = bytes[position]
        // Only single-byte tags occur in the fields walked here.
        guard tag & 0x1F != 0x1F else { return nil }
        let first = bytes[position + 1]
        var length = 0
        var contentStart = position + 2
        if first < 0x80 {
            length = Int(first)
        } else {
            let count = Int(first & 0x7F)
            // At most four length bytes, and fewer than an Int holds (32-bit platforms), so the
            // length can neither overflow nor turn negative.
            guard count >= 1, count <= 4, count < MemoryLayout<Int>.size, contentStart + count <= limit else { return nil }
            for byte in bytes[contentStart..<(contentStart + count)] { length = length << 8 | Int(byte) }
            contentStart += count
        }
        guard length >= 0, length <= limit - contentStart else { return nil }
        return DERElement(tag: tag, start: position, contentStart: contentStart, end: contentStart + length)
    }
}
