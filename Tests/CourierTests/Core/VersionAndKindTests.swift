import Courier
import CourierOutbox
import Foundation
import Testing

/// The promises the package makes to apps about its own shape: the version it reports, and error
/// kinds that can grow without breaking an app's `switch`.
@Suite("Version and extensible error kinds")
struct VersionAndKindTests {
    /// The newest release heading of CHANGELOG.md, such as `0.1.0` from `## [0.1.0] - 2026-11-26`.
    static func changelogVersion() throws -> String {
        let text = try String(contentsOf: ExternalServer.root.appendingPathComponent("CHANGELOG.md"), encoding: .utf8)
        let heading = try #require(text.split(separator: "\n").first { $0.hasPrefix("## [") && !$0.hasPrefix("## [Unreleased]") })
        let version = heading.dropFirst(4).prefix { $0 != "]" }
        return String(version)
    }

    @Test
    func theConstantIsTheChangelogsNewestRelease() throws {
        let version = try Self.changelogVersion()
        #expect(courierVersion == version)
        // Semantic versioning: three dot-separated numbers.
        let parts = courierVersion.split(separator: ".")
        #expect(parts.count == 3 && parts.allSatisfy { Int($0) != nil })
    }

    @Test
    func courierVersionPrintsTheChangelogsVersion() async throws {
        let result = try await runCourier(["--version"])
        #expect(result.status == 0)
        #expect(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == (try Self.changelogVersion()))
    }

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
