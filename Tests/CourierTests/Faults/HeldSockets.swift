import Foundation

/// The TCP sockets of this process's network namespace that lead to one server and that a file
/// descriptor still holds, read from `/proc/net/tcp` and `/proc/net/tcp6`.
///
/// A socket a program has closed either disappears or lingers in TIME_WAIT with inode 0; a
/// socket with a non-zero inode is still held by some descriptor. So, after a transport has shut
/// down, a non-zero count for the server it talked to is a leaked descriptor (or a connection
/// still open), whatever else the test process does at the same time: the count is per server
/// address and port, which no other test shares.
enum HeldSockets {
    /// Whether the kernel's socket tables can be read here.
    static var isReadable: Bool {
        #if os(Linux)
        FileManager.default.isReadableFile(atPath: "/proc/net/tcp")
        #else
        false
        #endif
    }

    /// The sockets to `address:port` (an IPv4 address, also matched in its IPv4-mapped IPv6 form)
    /// that a descriptor holds, with the TCP state of each (hex, as the kernel writes it).
    static func to(_ address: String, port: Int) -> [String] {
        let octets = address.split(separator: ".").compactMap { UInt8($0) }
        guard octets.count == 4 else { return [] }
        // The kernel writes each 32-bit word of an address in host (little-endian) byte order.
        let word = octets.reversed().map { String(format: "%02X", $0) }.joined()
        let wanted = "\(word):\(String(format: "%04X", port))"
        var held: [String] = []
        for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
            guard let text = Self.readWhole(table) else { continue }
            for line in text.split(separator: "\n").dropFirst() {
                let fields = line.split(separator: " ", omittingEmptySubsequences: true)
                // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode …
                guard fields.count > 9 else { continue }
                let remote = fields[2]
                guard remote.hasSuffix(wanted), remote.count == wanted.count || remote.hasPrefix("0000000000000000FFFF0000") else { continue }
                if fields[9] != "0" { held.append(String(fields[3])) }
            }
        }
        return held
    }

    /// The whole of a kernel table, read to its end: a proc file reports a size of 0, and
    /// Foundation's file reading then returns only its first page (measured: 27 of a table's 317
    /// lines), so a busy test process's sockets would go unseen.
    static func readWhole(_ path: String) -> String? {
        let descriptor = open(path, O_RDONLY)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                return nil
            }
            if count == 0 { break }
            bytes += chunk[0..<count]
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
