import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import Testing

@testable import Courier
@testable import CourierAsyncHTTPClient

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Which transport failures say the connection failed before any byte of a response — what the
/// cache reads as "disconnected" (RFC 9111 §4.2.4, `DisconnectedStaleTests`) — on each transport.
/// A timeout, a malformed answer or an invalid request is not: the server was reached, or nothing
/// was tried.
@Suite("Transports say when the connection failed before any byte of a response")
struct ConnectionFailureTests {
    /// A body the platform cannot decode is kind `decoding` on both transports. On Linux libcurl
    /// reports it in words (`StreamingAndCompressionTests.badCompressedDataFailsTyped`, on the
    /// wire); Apple platforms report it with their own codes, which were kind `transport`.
    @Test
    func theURLLoadingSystemsCodesForAnUndecodableBodyAreDecodingFailures() {
        for code in [NSURLErrorCannotDecodeContentData, NSURLErrorCannotDecodeRawData] {
            let mapped = URLSessionTransport.mapError(NSError(domain: NSURLErrorDomain, code: code))
            #expect(mapped.kind == .decoding, "code \(code)")
            #expect(!mapped.couldNotConnect)
        }
    }

    @Test
    func asyncHTTPClientsConnectionFailures() {
        for errno in [ECONNREFUSED, ECONNRESET, EHOSTUNREACH, ENETUNREACH] {
            #expect(AsyncHTTPClientTransport.mapError(IOError(errnoCode: errno, reason: "connect")).couldNotConnect, "errno \(errno)")
        }
        #expect(AsyncHTTPClientTransport.mapError(HTTPClientError.remoteConnectionClosed).couldNotConnect)
        // A name that does not resolve: NetworkFaultTests.aHostNameThatDoesNotResolveFailsAsTransport, on the wire.
        // The server was reached, or nothing was tried, or it is slow: not disconnected.
        #expect(!AsyncHTTPClientTransport.mapError(IOError(errnoCode: EINVAL, reason: "write")).couldNotConnect)
        #expect(!AsyncHTTPClientTransport.mapError(HTTPParserError.invalidStatus).couldNotConnect)
        #expect(!AsyncHTTPClientTransport.mapError(HTTPClientError.invalidURL).couldNotConnect)
        #expect(!AsyncHTTPClientTransport.mapError(HTTPClientError.connectTimeout).couldNotConnect)
        #expect(!AsyncHTTPClientTransport.mapError(HTTPClientError.readTimeout).couldNotConnect)
    }

    @Test
    func urlSessionsConnectionFailures() {
        func mapped(_ code: Int, _ description: String = "x") -> CourierError {
            URLSessionTransport.mapError(NSError(domain: NSURLErrorDomain, code: code, userInfo: [NSLocalizedDescriptionKey: description]))
        }
        let codes = [
            NSURLErrorCannotConnectToHost, NSURLErrorCannotFindHost, NSURLErrorNetworkConnectionLost, NSURLErrorNotConnectedToInternet,
        ]
        for code in codes {
            #expect(mapped(code).couldNotConnect, "code \(code)")
            #expect(mapped(code).kind == .transport)
        }
        // libcurl's "empty reply" (the connection closed before any byte) comes as a bad server response.
        #expect(mapped(NSURLErrorBadServerResponse, "Empty reply from server").couldNotConnect)
        #expect(!mapped(NSURLErrorBadServerResponse, "Weird server reply").couldNotConnect)
        #expect(!mapped(NSURLErrorTimedOut).couldNotConnect)
        #expect(!mapped(NSURLErrorBadURL).couldNotConnect)
        #expect(mapped(NSURLErrorBadURL).kind == .invalidRequest)
    }

    /// URLSession only (the setting is `URLSessionConfiguration`'s; AsyncHTTPClientTransport has
    /// none): an idle timeout FoundationNetworking cannot take in whole milliseconds of an Int —
    /// infinite or huge — is kept in its range, so the request is sent and answered instead of
    /// trapping.
    @Test(arguments: [TimeInterval.infinity, .greatestFiniteMagnitude, 1e17])
    func anIdleTimeoutOutsideThePlatformsRangeStillSends(_ seconds: TimeInterval) async throws {
        let server = try await http1Server { _ in .text("ok") }
        let configuration = URLSessionConfiguration.ephemeral
        configuration.timeoutIntervalForRequest = seconds
        let transport = URLSessionTransport(configuration: configuration)
        let client = Client(configuration: .init(transport: transport, baseURL: server.baseURL))
        let answer = try await client.send(Endpoint<String>(path: "/a", decoding: .string))
        #expect(answer == "ok")
        transport.shutdown()
        try await server.stop()
        #expect(URLSessionTransport.idleTimeout(.nan) == 1e9)
        #expect(URLSessionTransport.idleTimeout(0) == 0)
        #expect(URLSessionTransport.idleTimeout(30) == 30)
    }

    /// URLSession only (as above): an idle timeout under a second, which FoundationNetworking
    /// would turn into none at all (every request failing at once), goes to the session as one
    /// second. The configuration is checked rather than a request timed: a request answered
    /// within one second is a race on a loaded machine.
    @Test(arguments: [0.5, 0.001, 0.999])
    func anIdleTimeoutUnderASecondBecomesOneSecond(_ seconds: TimeInterval) {
        let configuration = URLSessionConfiguration.ephemeral
        configuration.timeoutIntervalForRequest = seconds
        let sealed = URLSessionTransport.sealed(configuration)
        #if canImport(FoundationNetworking)
        #expect(sealed.timeoutIntervalForRequest == 1)
        #else
        #expect(sealed.timeoutIntervalForRequest == seconds)
        #endif
        #expect(configuration.timeoutIntervalForRequest == seconds, "the app's configuration is left as it was")
    }
}
