import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The TCP sockets of this process's network namespace that lead to one server and that a file
/// descriptor still holds, read from `/proc/net/tcp` and `/proc/net/tcp6`.
///
/// A socket a program has closed either disappears or lingers in TIME_WAIT with inode 0; a
/// socket with a non-zero inode is still held by some descriptor. So, after a transport has shut
/// down, a non-zero count for the server it talked to is a leaked descriptor (or a connection
/// still open), whatever else the test process does at the same time: the count is per server
/// address and port, which no other test shares while the server listens (the fault suites'
/// namespace addresses are never reused; a loopback port may be, after its server stopped).
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
    ///
    /// `fromPort` keeps only the sockets whose own (local) port is that one.
    static func to(_ address: String, port: Int, fromPort: Int? = nil) -> [String] {
        let octets = address.split(separator: ".").compactMap { UInt8($0) }
        guard octets.count == 4 else { return [] }
        // The kernel writes each 32-bit word of an address in host (little-endian) byte order.
        let word = octets.reversed().map { String(format: "%02X", $0) }.joined()
        let wanted = "\(word):\(String(format: "%04X", port))"
        // The kernel lists the table a page at a time; while other sockets come and go, a line
        // can be listed twice (measured: one socket counted two and three times in parallel test
        // runs). Each socket counts once, by its inode.
        var held: [Substring: String] = [:]
        for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
            guard let text = Self.readWhole(table) else { continue }
            for line in text.split(separator: "\n").dropFirst() {
                let fields = line.split(separator: " ", omittingEmptySubsequences: true)
                // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode …
                guard fields.count > 9 else { continue }
                let remote = fields[2]
                guard remote.hasSuffix(wanted), remote.count == wanted.count || remote.hasPrefix("0000000000000000FFFF0000") else {
                    continue
                }
                if let fromPort, !fields[1].hasSuffix(":\(String(format: "%04X", fromPort))") { continue }
                if fields[9] != "0" { held[fields[9]] = String(fields[3]) }
            }
        }
        return Array(held.values)
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

/// The measurement the fault suites rest on: it must see a held socket, including one listed
/// past the first page of the kernel's table, and stop seeing it once the socket is closed.
@Suite("Held sockets are read from the kernel's whole table")
struct HeldSocketsTests {
    /// A TCP socket listening on 127.0.0.1 at a free port, and that port.
    static func listener() throws -> (socket: Int32, port: Int) {
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(socket, $0, length) == 0 && listen(socket, 8) == 0 && getsockname(socket, $0, &length) == 0
            }
        }
        guard socket >= 0, bound else { throw POSIXError(.EADDRNOTAVAIL) }
        return (socket, Int(UInt16(bigEndian: address.sin_port)))
    }

    @Test(.enabled(if: HeldSockets.isReadable, "needs /proc/net/tcp (Linux)"))
    func aConnectedSocketIsSeenAndAClosedOneIsNot() async throws {
        // Enough other sockets that the table runs well past one page (about 25 lines).
        let crowd = try (0..<80).map { _ in try Self.listener().socket }
        defer { for socket in crowd { close(socket) } }
        let (server, port) = try Self.listener()
        defer { close(server) }
        // Other sockets to this port may come and go while the test runs: connections another
        // test left open to an earlier server on the port, or another test's probe of a port it
        // picked for a child server that has not bound it yet (it reaches this listener). So
        // only the socket from the client's own port counts.
        let client = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(client, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
        #expect(connected)
        var local = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let named = withUnsafeMutablePointer(to: &local) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(client, $0, &length) == 0 }
        }
        #expect(named)
        let clientPort = Int(UInt16(bigEndian: local.sin_port))
        #expect(HeldSockets.to("127.0.0.1", port: port, fromPort: clientPort) == ["01"])  // `client`, ESTABLISHED
        close(client)
        // A child process another test spawns meanwhile holds a copy of every descriptor from
        // its clone until its exec closes the close-on-exec ones; on two busy cores that window
        // was long enough to see `client` still ESTABLISHED right after the close. So the closed
        // socket must disappear within a few seconds (a socket no process closes stays).
        #expect(
            await eventually(seconds: 10) { HeldSockets.to("127.0.0.1", port: port, fromPort: clientPort).isEmpty },
            "still held: \(HeldSockets.to("127.0.0.1", port: port, fromPort: clientPort))")
    }
}
