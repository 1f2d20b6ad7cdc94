import Foundation
import Logging

/// Debug options a developer switches on without rebuilding: log level, body logging, HAR capture.
///
/// Read once, when a ``Client`` is created, from the environment and from launch arguments (as
/// Xcode's scheme editor passes them on Apple platforms); all off by default:
///
/// | environment | launch argument | effect |
/// |---|---|---|
/// | `COURIER_LOG_LEVEL=debug` | `-CourierLogLevel debug` | the client logs at that level (a `Logger` labelled `courier` when it has none) |
/// | `COURIER_LOG_BODIES=1` | `-CourierLogBodies YES` | bodies are logged at `.trace` (redacted, capped) |
/// | `COURIER_HAR=/tmp/app.har` | `-CourierHAR /tmp/app.har` | every exchange is recorded to that HAR file, rewritten after each request |
///
/// A launch argument wins over the environment.
public struct DebugOptions: Sendable, Equatable {
    /// The level the client logs at; `nil` leaves the configuration's logger as it is.
    public var logLevel: Logger.Level?
    /// Whether bodies are logged at `.trace`.
    public var logsBodies: Bool
    /// Where a HAR file of the client's traffic is written; `nil` for none.
    public var harPath: String?

    /// Creates options.
    public init(logLevel: Logger.Level? = nil, logsBodies: Bool = false, harPath: String? = nil) {
        self.logLevel = logLevel
        self.logsBodies = logsBodies
        self.harPath = harPath
    }

    /// No debug option, whatever the environment says.
    public static let off = DebugOptions()

    /// The options given by an environment and launch arguments.
    public init(environment: [String: String], arguments: [String]) {
        func argument(_ name: String) -> String? {
            guard let index = arguments.firstIndex(of: "-\(name)"), index + 1 < arguments.count else { return nil }
            return arguments[index + 1]
        }
        let level = argument("CourierLogLevel") ?? environment["COURIER_LOG_LEVEL"]
        self.logLevel = level.flatMap { Logger.Level(rawValue: $0.lowercased()) }
        let bodies = (argument("CourierLogBodies") ?? environment["COURIER_LOG_BODIES"])?.lowercased()
        self.logsBodies = ["1", "yes", "true", "on"].contains(bodies ?? "")
        let har = argument("CourierHAR") ?? environment["COURIER_HAR"]
        self.harPath = har?.isEmpty == false ? har : nil
    }

    /// The options this process was started with.
    public static var process: DebugOptions {
        DebugOptions(environment: ProcessInfo.processInfo.environment, arguments: ProcessInfo.processInfo.arguments)
    }
}

extension Client {
    /// The monitors a client runs: its configuration's, a log monitor for its logger, and what the debug options add.
    static func monitors(of configuration: Configuration) -> [any EventMonitor] {
        let options = configuration.debugOptions ?? .process
        var monitors = configuration.eventMonitors
        var logger = configuration.logger
        if let level = options.logLevel {
            if logger == nil { logger = Logger(label: "courier") }
            logger?.logLevel = level
        }
        if let logger {
            monitors.append(
                LogMonitor(logger: logger, redactor: configuration.redactor, logsBodies: configuration.logsBodies || options.logsBodies))
        }
        if let path = options.harPath {
            // One document per path for the whole process: a second client (a token client
            // beside the API's) adds its entries rather than writing over the first's.
            monitors.append(HARRecorder.shared(writingTo: URL(fileURLWithPath: path), redactor: configuration.redactor))
        }
        return monitors
    }
}
