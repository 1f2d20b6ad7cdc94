import Foundation

/// A backend service an app talks to, such as `main`, `payments` or `bbs`.
public struct ServiceID: Hashable, Sendable, Codable, ExpressibleByStringLiteral, CustomStringConvertible {
    /// The service's name.
    public let name: String

    /// Creates a service identifier.
    public init(_ name: String) { self.name = name }

    /// Creates a service identifier from a literal.
    public init(stringLiteral value: String) { self.name = value }

    /// The service's name.
    public var description: String { self.name }

    /// The main backend.
    public static let main = ServiceID("main")

    /// Decodes a service from its name.
    public init(from decoder: any Decoder) throws { self.name = try decoder.singleValueContainer().decode(String.self) }

    /// Encodes the service as its name.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(self.name)
    }
}

/// A deployment stage of the backends: develop, test, pre-release, hotfix, release, or a custom one.
public struct ServerEnvironment: Hashable, Sendable, Codable, ExpressibleByStringLiteral, CustomStringConvertible {
    /// The environment's name.
    public let name: String

    /// Creates an environment.
    public init(_ name: String) { self.name = name }

    /// Creates an environment from a literal.
    public init(stringLiteral value: String) { self.name = value }

    /// The environment's name.
    public var description: String { self.name }

    /// Daily development servers.
    public static let develop = ServerEnvironment("develop")
    /// The test (QA) servers.
    public static let test = ServerEnvironment("test")
    /// Servers with the next release, before it ships.
    public static let preRelease = ServerEnvironment("pre-release")
    /// Servers with an urgent fix.
    public static let hotfix = ServerEnvironment("hotfix")
    /// Production.
    public static let release = ServerEnvironment("release")
    /// A custom environment, such as a developer's own machine.
    public static func custom(_ name: String) -> ServerEnvironment { ServerEnvironment(name) }

    /// Decodes an environment from its name.
    public init(from decoder: any Decoder) throws { self.name = try decoder.singleValueContainer().decode(String.self) }

    /// Encodes the environment as its name.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(self.name)
    }
}

/// Where the manual environment switch is kept between launches.
public protocol EnvironmentStore: Sendable {
    /// The environment chosen by hand, if any.
    func load() -> ServerEnvironment?
    /// Saves the choice; `nil` forgets it (back to the build default).
    func save(_ environment: ServerEnvironment?) throws
}

/// Which base URL each service has in each environment, and which environment is active.
///
/// The active environment follows the multi-server rule: a release build is locked to
/// `release` and cannot be switched; otherwise a manual switch (persisted through the store)
/// wins over the build's default. Switching affects requests started afterwards: a request
/// resolves its base URL once, when it is built.
///
/// ```swift
/// let servers = ServerDirectory(
///     urls: [.main: [.develop: devURL, .release: prodURL], "payments": [.develop: payDev, .release: payProd]],
///     buildDefault: .develop, isReleaseBuild: false, store: FileEnvironmentStore(url: settingsFile))
/// let client = Client(configuration: .init(transport: transport) { $0.servers = servers })
/// ```
public final class ServerDirectory: Sendable {
    /// The base URLs, by service and environment.
    public let urls: [ServiceID: [ServerEnvironment: URL]]
    /// The environment the build selects when nothing was chosen by hand.
    public let buildDefault: ServerEnvironment
    /// Whether this is a release build (locked to `release`).
    public let isReleaseBuild: Bool
    private let store: any EnvironmentStore
    private let manual: Locked<ServerEnvironment?>
    /// Guards no value: a `Locked(())` would share its address with its lock (see `Locked`).
    private let switching = NSLock()
    private let parsed = Locked<[URL: BaseURL]>([:])

    /// Creates a directory; the manual choice is read from `store` once.
    public init(
        urls: [ServiceID: [ServerEnvironment: URL]],
        buildDefault: ServerEnvironment,
        isReleaseBuild: Bool,
        store: any EnvironmentStore = InMemoryEnvironmentStore()
    ) {
        self.urls = urls
        self.buildDefault = buildDefault
        self.isReleaseBuild = isReleaseBuild
        self.store = store
        // A saved choice that names an environment no service has any more (an old build's)
        // is forgotten: the build default applies, as switching to it would have been refused.
        let saved = store.load()
        let known = Set(urls.values.flatMap(\.keys))
        self.manual = Locked(saved.flatMap { known.contains($0) ? $0 : nil })
    }

    /// The environment requests use now.
    public var activeEnvironment: ServerEnvironment {
        if self.isReleaseBuild { return .release }
        return self.manual.current ?? self.buildDefault
    }

    /// Switches to `environment` and persists the choice; `nil` returns to the build default.
    ///
    /// - Throws: ``CourierError`` of kind `invalidRequest` in a release build, or when no service
    ///   has a URL for `environment`.
    public func switchEnvironment(to environment: ServerEnvironment?) throws {
        if self.isReleaseBuild {
            throw CourierError.invalidRequest("a release build is locked to the release environment")
        }
        if let environment, !self.environments.contains(environment) {
            throw CourierError.invalidRequest("no service has a URL for the environment '\(environment)'")
        }
        // One switch at a time, from its save to its use: two at once must not leave the store
        // holding one choice and requests using the other. (A lock of its own, so requests that
        // read the active environment never wait for a save.)
        try self.switching.withLock {
            try self.store.save(environment)
            self.manual.withLock { $0 = environment }
        }
    }

    /// The services, sorted by name (for a debug menu).
    public var services: [ServiceID] { self.urls.keys.sorted { $0.name < $1.name } }

    /// Every environment some service has a URL for, in the usual order, custom ones last.
    public var environments: [ServerEnvironment] {
        let known: [ServerEnvironment] = [.develop, .test, .preRelease, .hotfix, .release]
        let all = Set(self.urls.values.flatMap(\.keys))
        return known.filter(all.contains) + all.subtracting(known).sorted { $0.name < $1.name }
    }

    /// The base URL of `service` in the active environment (or the one given).
    ///
    /// - Throws: ``CourierError`` of kind `invalidRequest` when the service or its URL for the
    ///   environment is missing — never a crash.
    public func baseURL(for service: ServiceID, in environment: ServerEnvironment? = nil) throws -> URL {
        let environment = environment ?? self.activeEnvironment
        guard let byEnvironment = self.urls[service] else {
            throw CourierError.invalidRequest("the service '\(service)' is not in the server directory")
        }
        guard let url = byEnvironment[environment] else {
            throw CourierError.invalidRequest("the service '\(service)' has no URL for the environment '\(environment)'")
        }
        return url
    }

    /// The parsed base of a service, cached.
    func base(for service: ServiceID) throws -> BaseURL {
        let url = try self.baseURL(for: service)
        if let cached = self.parsed.withLock({ $0[url] }) { return cached }
        guard let base = BaseURL(url) else {
            throw CourierError.invalidRequest("the URL '\(url)' of service '\(service)' is not an http(s) URL")
        }
        self.parsed.withLock { $0[url] = base }
        return base
    }
}

/// Keeps the environment choice in memory only (for tests and previews).
public final class InMemoryEnvironmentStore: EnvironmentStore {
    private let value: Locked<ServerEnvironment?>

    /// Creates a store holding `initial`.
    public init(_ initial: ServerEnvironment? = nil) { self.value = Locked(initial) }

    /// The stored choice.
    public func load() -> ServerEnvironment? { self.value.current }

    /// Replaces the stored choice.
    public func save(_ environment: ServerEnvironment?) throws { self.value.withLock { $0 = environment } }
}

/// Keeps the environment choice in a small JSON file, written atomically.
public struct FileEnvironmentStore: EnvironmentStore {
    private struct Stored: Codable {
        var environment: ServerEnvironment?
    }

    /// The file's location.
    public let url: URL

    /// Creates a store at `url`.
    public init(url: URL) { self.url = url }

    /// The stored choice; a missing or unreadable file means none.
    public func load() -> ServerEnvironment? {
        guard let data = try? Data(contentsOf: self.url) else { return nil }
        return (try? JSONDecoder().decode(Stored.self, from: data))?.environment
    }

    /// Writes the choice to a temporary file and moves it into place.
    public func save(_ environment: ServerEnvironment?) throws {
        let data = try JSONEncoder().encode(Stored(environment: environment))
        try data.write(to: self.url, options: .atomic)
    }
}
