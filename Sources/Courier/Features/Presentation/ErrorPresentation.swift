import Foundation

/// How a user interface should show an error.
public enum ErrorPresentation: String, Sendable, Hashable, CaseIterable {
    /// Not at all (a cancellation).
    case silent
    /// A short, self-dismissing message (a business message from the server).
    case toast
    /// A dialog the user dismisses.
    case alert
    /// Send the user to sign in again.
    case reLogin
}

/// Decides the presentation of each error; the client applies it before throwing.
///
/// The standard classifier: cancellations are silent; business messages are toasts; HTTP 401 and
/// `authenticationRequired` ask to sign in again; everything else is an alert. Customise it:
///
/// ```swift
/// $0.errorClassifier = ErrorClassifier { error in
///     error.kind == .timeout ? .toast : ErrorClassifier.standard.classify(error)
/// }
/// ```
public struct ErrorClassifier: Sendable {
    /// Returns the presentation of an error.
    public let classify: @Sendable (CourierError) -> ErrorPresentation

    /// Creates a classifier from a closure.
    public init(_ classify: @escaping @Sendable (CourierError) -> ErrorPresentation) {
        self.classify = classify
    }

    /// The defaults described above.
    public static let standard = ErrorClassifier { error in
        switch error.kind {
        case .cancelled: return .silent
        case .business: return .toast
        case .authenticationRequired: return .reLogin
        case .httpStatus where error.status?.code == 401: return .reLogin
        default: return .alert
        }
    }
}

/// An event a response raised, such as a business code mapped to "session expired".
public struct CourierEvent: Sendable {
    /// The event's name.
    public var name: String
    /// The error that carried it.
    public var error: CourierError
}

/// Shows errors without flooding the user: identical presentations are coalesced.
///
/// Ten concurrent requests failing with the same business error produce one toast, not ten: an
/// error whose presentation, kind, code and message match one on screen is dropped until that one
/// is dismissed. A re-login presentation is raised once until ``resolveReLogin()`` is called.
/// Silent errors are never shown. The `show` closure runs on `queue`.
///
/// Call ``dismiss(_:)`` when a presentation leaves the screen, a toast that hides itself
/// included: until then an identical error is not shown again. At most
/// ``maxOnScreen`` presentations count as on screen; past that, the oldest is taken as gone
/// (so a presenter whose toasts are never dismissed keeps no more than that).
public final class ErrorPresenter: Sendable {
    /// One presentation on screen.
    public struct Shown: Sendable, Identifiable {
        /// Identifies it for ``ErrorPresenter/dismiss(_:)``.
        public let id: UInt64
        /// The error shown.
        public let error: CourierError
    }

    private struct Fingerprint: Hashable {
        var presentation: ErrorPresentation
        var kind: CourierError.Kind
        var code: String?
        var message: String
    }

    private struct State {
        var onScreen: [Fingerprint: UInt64] = [:]
        var reLoginRaised = false
        var nextID: UInt64 = 0
    }

    /// How many presentations count as on screen at most (the oldest is taken as gone past it).
    public static let maxOnScreen = 32

    private let state = Locked(State())
    private let queue: DispatchQueue
    private let show: @Sendable (Shown) -> Void

    /// Creates a presenter that calls `show` on `queue` (the main queue by default).
    public init(queue: DispatchQueue = .main, show: @escaping @Sendable (Shown) -> Void) {
        self.queue = queue
        self.show = show
    }

    /// Reports an error; it is shown unless silent or already on screen. Returns whether it will be shown.
    @discardableResult
    public func report(_ error: CourierError) -> Bool {
        guard error.presentation != .silent else { return false }
        let fingerprint = Fingerprint(
            presentation: error.presentation, kind: error.kind, code: error.code ?? error.status.map { "\($0.code)" },
            message: error.message)
        let shown: Shown? = self.state.withLock { state in
            if error.presentation == .reLogin {
                guard !state.reLoginRaised else { return nil }
                state.reLoginRaised = true
            } else if state.onScreen[fingerprint] != nil {
                return nil
            }
            state.nextID += 1
            if error.presentation != .reLogin {
                // The oldest toast goes first (toasts hide themselves); an alert stays while one
                // is there to go.
                if state.onScreen.count >= Self.maxOnScreen,
                    let oldest = state.onScreen.filter({ $0.key.presentation == .toast }).min(by: { $0.value < $1.value })
                        ?? state.onScreen.min(by: { $0.value < $1.value })
                {
                    state.onScreen[oldest.key] = nil
                }
                state.onScreen[fingerprint] = state.nextID
            }
            return Shown(id: state.nextID, error: error)
        }
        guard let shown else { return false }
        self.queue.async { self.show(shown) }
        return true
    }

    /// The user dismissed a presentation: an identical error may be shown again.
    public func dismiss(_ id: UInt64) {
        self.state.withLock { state in
            state.onScreen = state.onScreen.filter { $0.value != id }
        }
    }

    /// The user signed in again: a new re-login presentation may be raised.
    public func resolveReLogin() {
        self.state.withLock { $0.reLoginRaised = false }
    }
}
