import Courier
import CourierOutbox
import Foundation
import Testing

/// Error kinds that can grow without breaking an app's `switch`.
@Suite("Extensible error kinds")
struct VersionAndKindTests {
    /// A `switch` over a kind matches its static members by value; the `default` case an app
    /// must write is what lets a later version add kinds.
    static func label(_ kind: CourierError.Kind) -> String {
        switch kind {
        case .timeout: return "slow"
        case .httpStatus, .decoding: return "server"
        default: return "other"
        }
    }

    @Test
    func errorKindsMatchByValueAndKeepTheirNames() {
        #expect(Self.label(CourierError(.timeout, "late").kind) == "slow")
        #expect(Self.label(CourierError(.decoding, "bad").kind) == "server")
        #expect(Self.label(CourierError(.tls, "bad").kind) == "other")
        #expect(CourierError.Kind.transport == .transport)
        #expect(CourierError.Kind.transport != .timeout)
        #expect(CourierError.Kind.timeout ~= CourierError(.timeout, "late").kind)
        // The names are what logs, HAR files and metrics carry: they must not change.
        let names: [(CourierError.Kind, String)] = [
            (.transport, "transport"), (.timeout, "timeout"), (.cancelled, "cancelled"), (.httpStatus, "httpStatus"),
            (.decoding, "decoding"), (.invalidRequest, "invalidRequest"), (.responseTooLarge, "responseTooLarge"),
            (.redirect, "redirect"), (.tls, "tls"), (.constrained, "constrained"), (.business, "business"), (.rpc, "rpc"),
            (.authenticationRequired, "authenticationRequired"), (.pinMismatch, "pinMismatch"), (.middleware, "middleware"),
        ]
        for (kind, name) in names { #expect(kind.description == name) }
        #expect(Set(names.map(\.0)).count == names.count)
        #expect(CourierError(.rpc, "failed").description.hasPrefix("CourierError.rpc: failed"))
    }

    @Test
    func tlsReasonsAndOutboxKindsMatchByValueAndKeepTheirNames() {
        let reasons: [(TLSFailureReason, String)] = [
            (.expired, "expired"), (.notYetValid, "notYetValid"), (.untrustedIssuer, "untrustedIssuer"),
            (.hostnameMismatch, "hostnameMismatch"), (.pinMismatch, "pinMismatch"), (.handshakeFailure, "handshakeFailure"),
        ]
        for (reason, name) in reasons { #expect(reason.name == name) }
        #expect(Set(reasons.map(\.0)).count == reasons.count)
        #expect(TLSFailureReason.expired.description == "the certificate has expired")
        let kinds: [(OutboxError.Kind, String)] = [
            (.corrupt, "corrupt"), (.locked, "locked"), (.readOnly, "readOnly"), (.full, "full"), (.cannotOpen, "cannotOpen"),
            (.invalidRequest, "invalidRequest"), (.notFound, "notFound"), (.storage, "storage"),
        ]
        for (kind, name) in kinds { #expect(kind.description == name) }
        #expect(OutboxError(.locked, "busy").description == "OutboxError.locked: busy")
    }
}
