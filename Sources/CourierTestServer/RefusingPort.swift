import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A loopback port where a connection is refused, and that no other server can take while this
/// value lives: a socket bound to it that never listens.
///
/// (A port a test server listened on and then closed may be taken by another test's server at
/// once, which then answers requests meant to be refused.)
public final class RefusingPort: Sendable {
    /// The port, on 127.0.0.1.
    public let port: Int
    private let descriptor: Int32

    /// Binds a socket to a free loopback port without listening on it.
    public convenience init() throws {
        try self.init(binding: 0)
    }

    /// Holds `port` on 127.0.0.1 (a port a stopped server just let go); throws when it cannot
    /// be bound (another socket listens on it).
    public convenience init(_ port: Int) throws {
        try self.init(binding: port)
    }

    private init(binding port: Int) throws {
        #if canImport(Darwin)
        let descriptor = socket(AF_INET, SOCK_STREAM, 0)
        #else
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #endif
        guard descriptor >= 0 else { throw POSIXError(.EMFILE) }
        var reuse: Int32 = 1
        _ = setsockopt(descriptor, SOL_SOCKET, SO_REUSEADDR, &reuse, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, length) }
        }
        let named = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
        }
        guard bound == 0, named == 0 else {
            close(descriptor)
            throw POSIXError(.EADDRINUSE)
        }
        self.descriptor = descriptor
        self.port = Int(UInt16(bigEndian: address.sin_port))
    }

    deinit {
        close(self.descriptor)
    }
}
