import Foundation
import HTTPTypes
import Testing

@testable import Courier

/// The request-side rules both transports apply (`TransportRules`); their effect on the wire,
/// per transport, is in `CookieJarTests` and `URLSessionParityTests`.
@Suite("Transport rules: the fields on the wire, pins over cleartext, TLS messages")
struct TransportRulesTests {
    func wire(_ request: Request) -> [String] {
        var sent: [String] = []
        do {
            try TransportRules.wireFields(of: request) { sent.append("\($0): \($1)") }
        } catch {
            sent.append("refused: \(error.kind)")
        }
        return sent
    }

    /// RFC 6265 §5.4: the cookies travel as one `Cookie` field, joined by "; ".
    @Test
    func cookiesGoAsOneFieldAndTheBodysTypeOnlyWhenNoneIsSet() {
        var head = HTTPRequest(method: .post, scheme: "https", authority: "example.com", path: "/")
        head.headerFields.append(HTTPField(name: .cookie, value: "a=1"))
        head.headerFields.append(HTTPField(name: .accept, value: "*/*"))
        head.headerFields.append(HTTPField(name: .cookie, value: "b=2"))
        let typed = Request(head: head, body: .data(Data("{}".utf8), contentType: "application/json"))
        #expect(self.wire(typed) == ["Accept: */*", "Cookie: a=1; b=2", "Content-Type: application/json"])
        head.headerFields[.contentType] = "text/plain"
        let own = Request(head: head, body: .data(Data("x".utf8), contentType: "application/json"))
        #expect(self.wire(own).filter { $0.hasPrefix("Content-Type") } == ["Content-Type: text/plain"])
        #expect(self.wire(Request(head: head)).filter { $0.hasPrefix("Cookie") } == ["Cookie: a=1; b=2"])
        // RFC 9110 §5.5: no field value holds CR, LF or NUL, the body's type included.
        let broken = Request(
            head: HTTPRequest(method: .post, scheme: "https", authority: "example.com", path: "/"),
            body: .data(Data("x".utf8), contentType: "text/plain\r\nX-Injected: yes"))
        #expect(self.wire(broken).last == "refused: invalidRequest")
    }

    @Test
    func aPinnedHostIsRefusedOverCleartextAndAllowedOverHTTPS() throws {
        #expect(throws: CourierError.self) { try TransportRules.refuseCleartext(toPinnedHost: "example.com", scheme: "http") }
        #expect(throws: CourierError.self) { try TransportRules.refuseCleartext(toPinnedHost: "example.com", scheme: nil) }
        try TransportRules.refuseCleartext(toPinnedHost: "example.com", scheme: "HTTPS")
    }

    @Test
    func aTLSMessageNamesTheReasonThenThePlatformsText() {
        #expect(TransportRules.tlsMessage(.expired, platformText: "x") == "the TLS handshake failed: \(TLSFailureReason.expired) (x)")
        #expect(TransportRules.tlsMessage(.handshakeFailure, platformText: "x") == "the TLS handshake failed (x)")
        #expect(TransportRules.tlsMessage(nil, platformText: "x") == "the TLS handshake failed (x)")
    }

    @Test
    func aPausedTransferIsNeverLeftSuspendedOnceTheReaderHasDrained() {
        // URLSession on Apple platforms pauses a transfer for a slow reader (`PauseGate`, the one
        // part of that code compiled here). The delivering side reads the unread count at the
        // moment the reader drains everything and calls `consumed`: that call must see the pause
        // and resume, or the transfer stays suspended with nobody left to wake it.
        let gate = PauseGate(highWater: 100, lowWater: 10)
        let unread = Locked(150)
        let suspended = Locked(false)
        let readerDone = DispatchSemaphore(value: 0)
        gate.delivered(
            unread: {
                let seen = unread.current
                // The reader drains now, on another thread, and reports it.
                Thread.detachNewThread {
                    unread.withLock { $0 = 0 }
                    gate.consumed(unread: { unread.current }, resume: { suspended.withLock { $0 = false } })
                    readerDone.signal()
                }
                return seen
            },
            suspend: { suspended.withLock { $0 = true } })
        readerDone.wait()
        #expect(!suspended.current)
        #expect(!gate.isPaused)
        // Below the high-water mark nothing pauses; between the marks a pause holds.
        gate.delivered(unread: { 50 }, suspend: { suspended.withLock { $0 = true } })
        #expect(!gate.isPaused)
        gate.delivered(unread: { 150 }, suspend: { suspended.withLock { $0 = true } })
        gate.consumed(unread: { 50 }, resume: { suspended.withLock { $0 = false } })
        #expect(gate.isPaused && suspended.current)
        gate.consumed(unread: { 5 }, resume: { suspended.withLock { $0 = false } })
        #expect(!gate.isPaused && !suspended.current)
    }
}
