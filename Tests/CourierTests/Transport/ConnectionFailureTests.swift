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
}
