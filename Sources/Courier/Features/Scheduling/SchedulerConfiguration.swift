/// The limits the scheduler enforces; each is named and validated.
public struct SchedulerConfiguration: Sendable, Equatable {
    /// The most requests on the wire at once, over all hosts.
    public var maxConcurrentRequests: Int
    /// The most requests on the wire at once to one host not known to speak HTTP/2.
    public var maxRequestsPerHost: Int
    /// The most requests on the wire at once to a host that answered over HTTP/2 (streams share one connection).
    public var maxRequestsPerHTTP2Host: Int
    /// How long a queued request waits before it is treated as one priority level higher, so low
    /// priorities are never starved for ever. At least a millisecond: a shorter one (a
    /// nanosecond) would age every queued request by thousands of levels at once, and a request
    /// queued a moment earlier would go first whatever the priorities.
    public var agingInterval: Duration

    /// Creates a configuration; values below 1 (or a non-positive interval) are raised to the
    /// minimum, as they are when set on the properties later.
    public init(
        maxConcurrentRequests: Int = 64,
        maxRequestsPerHost: Int = 8,
        maxRequestsPerHTTP2Host: Int = 100,
        agingInterval: Duration = .seconds(2)
    ) {
        self.maxConcurrentRequests = max(1, maxConcurrentRequests)
        self.maxRequestsPerHost = max(1, maxRequestsPerHost)
        self.maxRequestsPerHTTP2Host = max(1, maxRequestsPerHTTP2Host)
        self.agingInterval = max(agingInterval, .milliseconds(1))
    }

    /// The configuration with every value raised to its minimum, as ``init(maxConcurrentRequests:maxRequestsPerHost:maxRequestsPerHTTP2Host:agingInterval:)``
    /// does: the properties can be set below it after creation (a limit of 0 would hold every
    /// request for ever), so the scheduler reads only this.
    var validated: SchedulerConfiguration {
        SchedulerConfiguration(
            maxConcurrentRequests: self.maxConcurrentRequests, maxRequestsPerHost: self.maxRequestsPerHost,
            maxRequestsPerHTTP2Host: self.maxRequestsPerHTTP2Host, agingInterval: self.agingInterval)
    }

    /// The defaults: 64 in total, 8 per HTTP/1.1 host (AsyncHTTPClient's pool size), 100 per HTTP/2 host.
    public static let `default` = SchedulerConfiguration()
}

/// What the scheduler is doing, for metrics and debug screens.
public struct TrafficSnapshot: Sendable, Equatable {
    /// Requests waiting for a slot, by priority.
    public var queuedByPriority: [RequestPriority: Int]
    /// Requests on the wire, by host: the authority in lower case without the default port of
    /// `https` (`example.com`, `127.0.0.1:8080`); a cleartext `http` origin on its default port
    /// keeps `:80` (`example.com:80`), as it is another host to the limits.
    public var inFlightByHost: [String: Int]

    /// Requests waiting for a slot.
    public var queued: Int { self.queuedByPriority.values.reduce(0, +) }
    /// Requests on the wire.
    public var inFlight: Int { self.inFlightByHost.values.reduce(0, +) }
}
