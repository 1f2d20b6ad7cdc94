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
/// (A port a test server listened on and then closed may be taken at once by another test's
/// server, which then answers requests meant to be refused, or by an outgoing connection, which
/// keeps it from being held.) To have an origin that answers and then refuses, hold the port
/// first and start the server on it, `TestServer.start(.http1, port: refusing.port)`: the
/// server shares the port while it listens (both sockets allow address reuse: SO_REUSEADDR on
/// Linux, SO_REUSEPORT as well on Darwin), and once it
/// stops connections are refused and no one else is given the port.
public final class RefusingPort: Sendable {
    /// The port, on 127.0.0.1.
    public let port: Int
    private let descriptor: Int32

    /// Binds a socket to a free loopback port without listening on it.
    public init() throws {
        #if canImport(Darwin)
        let descriptor = socket(AF_INET, SOCK_STREAM, 0)
        #else
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #endif
        guard descriptor >= 0 else { throw POSIXError(.EMFILE) }
        var reuse: Int32 = 1
        _ = setsockopt(descriptor, SOL_SOCKET, SO_REUSEADDR, &reuse, socklen_t(MemoryLayout<Int32>.size))
        #if canImport(Darwin)
        // BSD sockets share an exact address and port only when both set SO_REUSEPORT (the test
        // server sets it there too). Not built here: Courier's tests run on Linux.
        _ = setsockopt(descriptor, SOL_SOCKET, SO_REUSEPORT, &reuse, socklen_t(MemoryLayout<Int32>.size))
        #endif
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
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
