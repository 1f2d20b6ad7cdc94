import Crypto
import Foundation

extension Sequence where Element == UInt8 {
    /// The bytes as lower-case hexadecimal digits.
    package var hexString: String {
        let digits = Array("0123456789abcdef".utf8)
        var text = [UInt8]()
        text.reserveCapacity(self.underestimatedCount * 2)
        for byte in self {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: text, as: UTF8.self)
    }
}

extension SHA256 {
    /// The lower-case hexadecimal SHA-256 digest of `bytes`.
    package static func hex<Bytes: DataProtocol>(_ bytes: Bytes) -> String {
        Self.hash(data: bytes).hexString
    }
}
