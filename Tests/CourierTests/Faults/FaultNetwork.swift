import Courier
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// setns(2), looked up at run time (the C library declares it only for _GNU_SOURCE).
private func enterNamespace(_ descriptor: Int32) -> Int32 {
    typealias SetNS = @convention(c) (Int32, Int32) -> Int32
    guard let symbol = dlsym(nil, "setns") else { return -1 }
    let cloneNewNet: Int32 = 0x4000_0000  // CLONE_NEWNET
    return unsafeBitCast(symbol, to: SetNS.self)(descriptor, cloneNewNet)
}

/// A network namespace joined to this one by a veth pair, where faults are made with nftables
/// and `tc`: a server listens inside it, the client reaches it over the veth.
///
/// Needs Linux, root, `ip` (iproute2), `tc` and `nft` (nftables). The fault tests run only where
/// those are present (the reason is printed when they are skipped); under `COURIER_CI=1`, which
/// `.ci/run` sets after installing nftables, a missing piece fails instead.
final class FaultNetwork: @unchecked Sendable {
    // Immutable after init.
    let name: String
    let clientAddress: String
    let serverAddress: String
    private let hostSide: String

    /// Why fault networks cannot be made here, or `nil` when they can.
    static let unavailableReason: String? = {
        #if os(Linux)
        guard getuid() == 0 else { return "needs root (ip netns)" }
        for tool in ["/usr/sbin/ip", "/usr/sbin/tc", "/usr/sbin/nft"] where !FileManager.default.isExecutableFile(atPath: tool) {
            return "needs \(tool) (iproute2, nftables)"
        }
        return nil
        #else
        return "network namespaces are Linux only"
        #endif
    }()

    static var isAvailable: Bool { Self.unavailableReason == nil }
    static var isRequired: Bool { ProcessInfo.processInfo.environment["COURIER_CI"] != nil }

    private static let counter = Locked(0)

    /// Removes, once per process, the namespaces and veth pairs of test runs that ended without
    /// removing theirs (a crash, a killed run): their names carry the pid, which is gone.
    private static let sweptStale: Void = {
        let namespaces = (try? FileManager.default.contentsOfDirectory(atPath: "/var/run/netns")) ?? []
        for name in namespaces where name.hasPrefix("courier-f") {
            let tag = name.dropFirst("courier-f".count)
            guard let pid = Int32(tag.split(separator: "x").first ?? ""), pid != getpid(), kill(pid, 0) != 0 else { continue }
            try? FaultNetwork.run("/usr/sbin/ip", "link", "del", "cf\(tag)")
            try? FaultNetwork.run("/usr/sbin/ip", "netns", "del", name)
        }
    }()

    /// Makes a fault network. Every command runs on a thread of its own, never on the caller's:
    /// the tests run on a cooperative pool of one thread per core, and commands that block it
    /// (each namespace takes about ten of them) starved the tests running beside them until
    /// their requests timed out.
    static func make() async throws -> FaultNetwork {
        try await onOwnThread { try FaultNetwork() }
    }

    private init() throws {
        _ = Self.sweptStale
        let index = Self.counter.withLock {
            $0 += 1
            return $0
        }
        let tag = "\(getpid())x\(index)"
        self.name = "courier-f\(tag)"
        self.hostSide = "cf\(tag)"
        // A /24 of its own per network: 10.(200 + pid % 50).(index).0.
        let subnet = "10.\(200 + Int(getpid()) % 50).\(index % 250)"
        self.clientAddress = "\(subnet).1"
        self.serverAddress = "\(subnet).2"
        try Self.run("/usr/sbin/ip", "netns", "add", self.name)
        do {
            try Self.run("/usr/sbin/ip", "link", "add", self.hostSide, "type", "veth", "peer", "name", "eth0", "netns", self.name)
            try Self.run("/usr/sbin/ip", "addr", "add", "\(self.clientAddress)/24", "dev", self.hostSide)
            try Self.run("/usr/sbin/ip", "link", "set", self.hostSide, "up")
            try self.inside("/usr/sbin/ip", "addr", "add", "\(self.serverAddress)/24", "dev", "eth0")
            try self.inside("/usr/sbin/ip", "link", "set", "eth0", "up")
            try self.inside("/usr/sbin/ip", "link", "set", "lo", "up")
            try self.inside("/usr/sbin/nft", "add", "table", "inet", "faults")
            try self.inside("/usr/sbin/nft", "add", "chain", "inet", "faults", "input", "{ type filter hook input priority 0; }")
            try self.inside("/usr/sbin/nft", "add", "chain", "inet", "faults", "output", "{ type filter hook output priority 0; }")
        } catch {
            self.removeNow()
            throw error
        }
    }

    /// Removes the namespace (and with it the veth pair and the rules).
    func remove() async {
        _ = try? await onOwnThread { self.removeNow() }
    }

    private func removeNow() {
        try? Self.run("/usr/sbin/ip", "link", "del", self.hostSide)
        try? Self.run("/usr/sbin/ip", "netns", "del", self.name)
    }

    /// Adds an nftables rule to the namespace's `input` or `output` chain.
    func rule(_ chain: String, _ rule: String) async throws {
        try await onOwnThread {
            try self.inside(["/usr/sbin/nft", "add", "rule", "inet", "faults", chain] + rule.split(separator: " ").map(String.init))
        }
    }

    /// Limits what the server sends to `kbit` kilobits per second (a token bucket on its side of the veth).
    func limitBandwidth(kbit: Int) async throws {
        try await onOwnThread {
            try self.inside(
                "/usr/sbin/tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", "\(kbit)kbit", "burst", "1600", "latency", "10s")
        }
    }

    /// A TCP socket bound to the server address inside the namespace and listening, for the
    /// test server (a socket stays in the namespace it was made in).
    func listeningSocket() async throws -> CInt {
        let path = "/var/run/netns/\(self.name)"
        let address = self.serverAddress
        // On a thread of its own, which enters the namespace and ends.
        return try await onOwnThread { try Self.listen(namespacePath: path, address: address).get() }
    }

    /// On a thread of its own: enter the namespace, make the socket, leave the thread (it ends).
    private static func listen(namespacePath: String, address: String) -> Result<CInt, POSIXError> {
        let original = open("/proc/thread-self/ns/net", O_RDONLY)
        let target = open(namespacePath, O_RDONLY)
        defer {
            if original >= 0 {
                _ = enterNamespace(original)
                close(original)
            }
            if target >= 0 { close(target) }
        }
        guard original >= 0, target >= 0, enterNamespace(target) == 0 else {
            return .failure(POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO))
        }
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard socket >= 0 else { return .failure(POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO)) }
        var on: Int32 = 1
        setsockopt(socket, SOL_SOCKET, SO_REUSEADDR, &on, socklen_t(MemoryLayout<Int32>.size))
        var sin = sockaddr_in()
        sin.sin_family = sa_family_t(AF_INET)
        sin.sin_port = 0
        inet_pton(AF_INET, address, &sin.sin_addr)
        let bound = withUnsafePointer(to: &sin) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, Glibc.listen(socket, 256) == 0 else {
            let code = errno
            close(socket)
            return .failure(POSIXError(POSIXErrorCode(rawValue: code) ?? .EIO))
        }
        return .success(socket)
    }

    private func inside(_ arguments: String...) throws {
        try self.inside(arguments)
    }

    private func inside(_ arguments: [String]) throws {
        try Self.run(["/usr/sbin/ip", "netns", "exec", self.name] + arguments)
    }

    private static func run(_ arguments: String...) throws {
        try Self.run(arguments)
    }

    /// Runs a command to its end (killed after 30 s); throws when it fails.
    private static func run(_ arguments: [String]) throws {
        let child = try ChildProcess(executable: arguments[0], arguments: Array(arguments.dropFirst()))
        let deadline = Date().addingTimeInterval(30)
        while child.isRunning {
            if Date() > deadline { child.kill(SIGKILL) }
            usleep(1000)
        }
        guard child.terminationStatus == 0 else {
            throw FaultNetworkError(command: arguments.joined(separator: " "), status: child.terminationStatus)
        }
    }
}

struct FaultNetworkError: Error, CustomStringConvertible {
    let command: String
    let status: Int32
    var description: String { "`\(self.command)` exited with \(self.status)" }
}
