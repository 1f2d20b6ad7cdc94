import Courier
import CourierTestServer
import Foundation
import HTTPTypes

/// A check of a `Transport` against the transport contract, over real sockets to
/// Courier's in-process test server.
///
/// Write a transport (over Network.framework, a company's own stack, a bridge) and run this in
/// your tests to learn whether it keeps the contract the pipeline relies on:
///
/// ```swift
/// @Test func myTransportKeepsTheContract() async {
///     let failures = await TransportConformance { MyTransport() }.run()
///     #expect(failures.isEmpty, "\(failures)")
/// }
/// ```
///
/// Each ``Check`` starts a server of its own (HTTP/1.1 on loopback, or TLS where it says so),
/// sends one or a few requests through a transport made for it, and reports what differs from
/// the contract as a ``Failure``; nothing throws. The TLS check uses a certificate authority
/// made for the run that no transport trusts.
public struct TransportConformance: Sendable {
    /// One part of the contract.
    public enum Check: String, CaseIterable, Sendable {
        /// Method, path, header fields and body reach the server; status, header fields and body
        /// come back.
        case exchange
        /// Answers to HEAD, and 204 and 304 answers, have no body whatever their
        /// `Content-Length` says, and end.
        case responsesWithoutBody
        /// A request body of unknown length arrives whole, in order.
        case streamedRequestBody
        /// The head and the first bytes come back before the rest of the body has been sent.
        case streamedResponseBody
        /// An 8 MiB response body arrives whole, in order.
        case largeResponseBody
        /// Cancelling the caller's task ends the exchange with kind `cancelled`, and the server
        /// sees the exchange abandoned.
        case cancellation
        /// A server whose certificate no one trusts fails with kind `tls`.
        case untrustedCertificate
        /// A port where nothing listens fails with kind `transport`, marked
        /// `CourierError.couldNotConnect`.
        case connectionRefused
    }

    /// What a transport did that the contract does not allow.
    public struct Failure: Sendable, CustomStringConvertible {
        /// The check that found it.
        public let check: Check
        /// What was expected and what happened.
        public let detail: String

        /// The check's name and what it found.
        public var description: String { "\(self.check.rawValue): \(self.detail)" }
    }

    private let makeTransport: @Sendable () async throws -> any Transport
    private let shutdown: @Sendable (any Transport) async -> Void

    /// Creates the suite for transports made by `makeTransport` (one per check), shut down after
    /// each check by `shutdown`.
    public init(
        shutdown: @escaping @Sendable (any Transport) async -> Void = { _ in },
        makeTransport: @escaping @Sendable () async throws -> any Transport
    ) {
        self.makeTransport = makeTransport
        self.shutdown = shutdown
    }

    /// Runs `checks` one after the other and returns what failed (empty when the transport
    /// keeps the contract).
    public func run(_ checks: [Check] = Check.allCases) async -> [Failure] {
        var failures: [Failure] = []
        for check in checks {
            do {
                let transport = try await self.makeTransport()
                let found = await Self.bounded(check, on: transport)
                await self.shutdown(transport)
                failures += found.map { Failure(check: check, detail: $0) }
            } catch {
                failures.append(Failure(check: check, detail: "the transport could not be made: \(error)"))
            }
        }
        return failures
    }

    // MARK: - The checks

    /// The test servers a check started, all stopped once it is over.
    private final class Servers: Sendable {
        private let started = Locked<[TestServer]>([])

        func start(_ mode: TestServer.Mode, handler: @escaping TestServer.Handler) async throws -> TestServer {
            let server = try await TestServer.start(mode, handler: handler)
            self.started.withLock { $0.append(server) }
            return server
        }

        func stopAll() async {
            for server in self.started.withLock({ $0 }) { try? await server.stop() }
        }
    }

    /// `check`, reported as a failure when it has not finished within `limit` (a transport that
    /// ignores cancellation and deadlines must not hang the suite; the check's task is then
    /// cancelled and left behind).
    private static func bounded(_ check: Check, on transport: any Transport, limit: Duration = .seconds(90)) async -> [String] {
        let answered = Locked(false)
        return await withCheckedContinuation { (continuation: CheckedContinuation<[String], Never>) in
            let work = Task {
                let servers = Servers()
                let found = await Self.run(check, on: transport, servers)
                await servers.stopAll()
                if answered.withLock({ done in
                    defer { done = true }
                    return !done
                }) {
                    continuation.resume(returning: found)
                }
            }
            Task {
                try? await Task.sleep(for: limit)
                if answered.withLock({ done in
                    defer { done = true }
                    return !done
                }) {
                    work.cancel()
                    continuation.resume(returning: ["did not finish within \(limit)"])
                }
            }
        }
    }

    private static func run(_ check: Check, on transport: any Transport, _ servers: Servers) async -> [String] {
        do {
            switch check {
            case .exchange: return try await self.exchange(transport, servers)
            case .responsesWithoutBody: return try await self.responsesWithoutBody(transport, servers)
            case .streamedRequestBody: return try await self.streamedRequestBody(transport, servers)
            case .streamedResponseBody: return try await self.streamedResponseBody(transport, servers)
            case .largeResponseBody: return try await self.largeResponseBody(transport, servers)
            case .cancellation: return try await self.cancellation(transport, servers)
            case .untrustedCertificate: return try await self.untrustedCertificate(transport, servers)
            case .connectionRefused: return await self.connectionRefused(transport)
            }
        } catch {
            return ["failed: \(error)"]
        }
    }

    private static func request(
        _ method: HTTPRequest.Method, _ server: TestServer, _ path: String, body: RequestBody? = nil, timeout: Duration = .seconds(45)
    ) -> Request {
        let scheme = server.baseURL.scheme ?? "http"
        let head = HTTPRequest(
            method: method, scheme: scheme, authority: "\(server.baseURL.host ?? "127.0.0.1"):\(server.port)", path: path)
        return Request(head: head, body: body, timeout: timeout)
    }

    private static func exchange(_ transport: any Transport, _ servers: Servers) async throws -> [String] {
        let server = try await servers.start(.http1) { request in
            ScriptedResponse(
                status: 201, headers: [("X-Conformance", "answer"), ("Content-Type", "text/plain")],
                body: Data("\(request.method) \(request.uri) \(request.bodyLength)".utf8))
        }
        var request = Self.request(.post, server, "/exchange?q=1", body: .data(Data("hello".utf8), contentType: "text/plain"))
        request.head.headerFields[HTTPField.Name("X-Probe")!] = "sent"
        let response = try await transport.send(request)
        let body = try await response.body.collect(upTo: 1 << 20)
        var failures: [String] = []
        if response.head.status.code != 201 { failures.append("status \(response.head.status.code), expected 201") }
        if response.head.headerFields[HTTPField.Name("X-Conformance")!] != "answer" {
            failures.append("the answer's X-Conformance field is missing")
        }
        if String(decoding: body, as: UTF8.self) != "POST /exchange?q=1 5" {
            failures.append("body '\(String(decoding: body.prefix(100), as: UTF8.self))', expected 'POST /exchange?q=1 5'")
        }
        let received = server.requests.first
        if received?.headers.first(where: { $0.0.lowercased() == "x-probe" })?.1 != "sent" {
            failures.append("the X-Probe field did not reach the server")
        }
        if received?.body != Data("hello".utf8) { failures.append("the request body did not reach the server whole") }
        return failures
    }

    private static func responsesWithoutBody(_ transport: any Transport, _ servers: Servers) async throws -> [String] {
        let server = try await servers.start(.http1) { request in
            switch request.path {
            case "/204": ScriptedResponse(status: 204)
            case "/304": ScriptedResponse(status: 304, headers: [("ETag", "\"v1\"")])
            // A 304 may announce the length a 200 would have had (RFC 9110 §8.6); a careless
            // server sends one with a 204 too. Neither has a body (RFC 9112 §6.3).
            case "/304-length": ScriptedResponse(status: 304, headers: [("ETag", "\"v1\""), ("Content-Length", "100")])
            case "/204-length": ScriptedResponse(status: 204, headers: [("Content-Length", "100")])
            default: ScriptedResponse(status: 200, headers: [("Content-Length", "100")], body: Data(count: 100))
            }
        }
        var failures: [String] = []
        for (method, path) in [
            (HTTPRequest.Method.head, "/head"), (.get, "/204"), (.get, "/304"), (.get, "/304-length"), (.get, "/204-length"),
        ] {
            let response = try await transport.send(Self.request(method, server, path))
            let body = try await response.body.collect(upTo: 1 << 20, deadline: .now + .seconds(30))
            if !body.isEmpty { failures.append("\(method) \(path): \(body.count) body bytes, expected none") }
        }
        return failures
    }

    private static func streamedRequestBody(_ transport: any Transport, _ servers: Servers) async throws -> [String] {
        let server = try await servers.start(.http1) { request in
            .text("\(request.bodyLength) \(request.body.reduce(0) { $0 &+ Int($1) })")
        }
        let chunks = (0..<64).map { index in Data(repeating: UInt8(index), count: 16_384) }
        let expected = "\(chunks.reduce(0) { $0 + $1.count }) \(chunks.reduce(0) { sum, chunk in chunk.reduce(sum) { $0 &+ Int($1) } })"
        let stream = AsyncStream<Data> { continuation in
            for chunk in chunks { continuation.yield(chunk) }
            continuation.finish()
        }
        let response = try await transport.send(Self.request(.post, server, "/upload", body: .stream(stream)))
        let answer = String(decoding: try await response.body.collect(upTo: 1 << 20), as: UTF8.self)
        return answer == expected ? [] : ["the server received '\(answer)' (length, byte sum), expected '\(expected)'"]
    }

    private static func streamedResponseBody(_ transport: any Transport, _ servers: Servers) async throws -> [String] {
        // The head and 1 KiB, then nothing for 60 s: the first bytes must be readable while the
        // rest is held back. A transport that waits for the whole body does not hand them over
        // within the 30 s this check allows (on loopback they take milliseconds; the rest is room
        // for a loaded machine).
        let server = try await servers.start(.http1) { _ in
            ScriptedResponse(status: 200, body: Data(count: 64 * 1024)).with(.stallMidBody(afterBytes: 1024, .seconds(60)))
        }
        let request = Self.request(.get, server, "/slow")
        enum Outcome: Sendable {
            case read(Int)
            case failed(String)
            case tooLate
        }
        let outcome = await withTaskGroup(of: Outcome.self) { group in
            group.addTask {
                do {
                    let response = try await transport.send(request)
                    var received = 0
                    for try await chunk in response.body {
                        received += chunk.count
                        if received >= 1024 { break }
                    }
                    return .read(received)
                } catch {
                    return .failed("\(error)")
                }
            }
            group.addTask {
                try? await Task.sleep(for: .seconds(30))
                return .tooLate
            }
            let first = await group.next() ?? .tooLate
            group.cancelAll()
            return first
        }
        switch outcome {
        case .read(let received):
            return received >= 1024 ? [] : ["only \(received) bytes arrived before the body ended, expected the first 1024"]
        case .failed(let error):
            return ["failed: \(error)"]
        case .tooLate:
            return ["the head and the first 1024 bytes were not handed over while the rest of the body was held back"]
        }
    }

    private static func largeResponseBody(_ transport: any Transport, _ servers: Servers) async throws -> [String] {
        let size = 8 << 20
        let server = try await servers.start(.http1) { _ in ScriptedResponse(status: 200).with(.generated(length: size)) }
        let response = try await transport.send(Self.request(.get, server, "/large"))
        var count = 0
        var wrong = 0
        for try await chunk in response.body {
            count += chunk.count
            wrong += chunk.count(where: { $0 != UInt8(ascii: "a") })
        }
        var failures: [String] = []
        if count != size { failures.append("\(count) bytes arrived, expected \(size)") }
        if wrong > 0 { failures.append("\(wrong) bytes differ from what was sent") }
        return failures
    }

    private static func cancellation(_ transport: any Transport, _ servers: Servers) async throws -> [String] {
        let server = try await servers.start(.http1) { _ in
            ScriptedResponse(status: 200, body: Data("late".utf8)).with(.stall(.seconds(60)))
        }
        let request = Self.request(.get, server, "/stall")
        let task = Task { try await transport.send(request) }
        guard await Self.eventually({ server.requests.count == 1 }) else {
            task.cancel()
            return ["the request never reached the server"]
        }
        task.cancel()
        var failures: [String] = []
        do {
            _ = try await task.value
            failures.append("the cancelled exchange returned a response")
        } catch let error as CourierError {
            if error.kind != .cancelled { failures.append("kind \(error.kind), expected cancelled") }
        } catch {
            failures.append("threw \(type(of: error)), expected a CourierError of kind cancelled")
        }
        if !(await Self.eventually({ server.abandonedCount == 1 })) { failures.append("the server never saw the exchange abandoned") }
        return failures
    }

    private static func untrustedCertificate(_ transport: any Transport, _ servers: Servers) async throws -> [String] {
        let certificates = try TestCertificates.generate(commonName: "Untrusted Conformance CA")
        let server = try await servers.start(.tls(certificates)) { _ in .text("must not be read") }
        do {
            _ = try await transport.send(Self.request(.get, server, "/tls"))
            return ["a server no one trusts was answered"]
        } catch let error as CourierError {
            var failures: [String] = []
            if error.kind != .tls { failures.append("kind \(error.kind), expected tls") }
            if !server.requests.isEmpty { failures.append("the request reached the server") }
            return failures
        } catch {
            return ["threw \(type(of: error)), expected a CourierError of kind tls"]
        }
    }

    private static func connectionRefused(_ transport: any Transport) async -> [String] {
        // A port bound but never listened on: a connection is refused, and no other server can
        // take the port meanwhile.
        guard let refusing = try? RefusingPort() else { return ["no free port could be found"] }
        let head = HTTPRequest(method: .get, scheme: "http", authority: "127.0.0.1:\(refusing.port)", path: "/")
        defer { withExtendedLifetime(refusing) {} }
        do {
            _ = try await transport.send(Request(head: head, timeout: .seconds(20)))
            return ["a port where nothing listens answered"]
        } catch let error as CourierError {
            guard error.kind == .transport else { return ["kind \(error.kind), expected transport"] }
            // What serving a stale answer when the origin cannot be reached goes by.
            return error.couldNotConnect ? [] : ["couldNotConnect is false for a refused connection: \(error)"]
        } catch {
            return ["threw \(type(of: error)), expected a CourierError of kind transport"]
        }
    }

    private static func eventually(_ condition: () -> Bool) async -> Bool {
        let deadline = ContinuousClock.now + .seconds(15)
        while ContinuousClock.now < deadline {
            if condition() { return true }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return condition()
    }
}
