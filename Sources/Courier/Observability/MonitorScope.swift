import Foundation

/// The monitors and the request a middleware is running for, so that middleware of this module
/// (an authenticator) can report its own events. Set only while monitors listen.
struct MonitorScope: Sendable {
    let events: EventHub
    let request: Request

    @TaskLocal static var current: MonitorScope?

    /// Tells the monitors that a credential was refreshed for the current request.
    static func authRefreshed() {
        guard let scope = Self.current else { return }
        scope.events.emit(scope.request) { $0.authRefreshed($1) }
    }
}
