/// How urgent a request is; the scheduler starts higher priorities first.
public enum RequestPriority: Int, Sendable, Hashable, Comparable, CaseIterable, CustomStringConvertible {
    /// Work the user will likely never wait for (prefetching far ahead).
    case veryLow = 0
    /// Background work.
    case low = 1
    /// The default.
    case normal = 2
    /// What the user is waiting for on screen.
    case high = 3
    /// What blocks the user right now.
    case veryHigh = 4

    /// Compares by urgency.
    public static func < (lhs: RequestPriority, rhs: RequestPriority) -> Bool {
        lhs.rawValue < rhs.rawValue
    }

    /// The name of the priority, such as `high`.
    public var description: String {
        switch self {
        case .veryLow: return "veryLow"
        case .low: return "low"
        case .normal: return "normal"
        case .high: return "high"
        case .veryHigh: return "veryHigh"
        }
    }

    /// Parses a name such as `high` or `veryHigh` (case-insensitive, `-` and `_` ignored).
    public init?(name: String) {
        let key = name.lowercased().replacingOccurrences(of: "-", with: "").replacingOccurrences(of: "_", with: "")
        guard let match = Self.allCases.first(where: { $0.description.lowercased() == key }) else { return nil }
        self = match
    }
}
