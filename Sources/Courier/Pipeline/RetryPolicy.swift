import Foundation
import HTTPTypes

/// When and how soon a failed attempt is sent again: a value, decided by a pure function.
///
/// By default only requests that are safe to repeat are retried: idempotent methods (GET, HEAD,
/// PUT, DELETE, OPTIONS) or any request carrying an `Idempotency-Key`; a request the server
/// provably did not process (an HTTP/2 stream it refused) may be retried whatever its method.
/// Retried: a connection that failed or was reset before any response byte, and the statuses
/// 429, 502, 503 and 504. The wait is exponential backoff with full jitter (a random time
/// between zero and `baseDelay × 2^(attempt−1)`, at most `maxDelay`), or the server's
/// `Retry-After` (seconds or an HTTP date) when it says — but never longer than
/// `maxRetryAfter`: a longer one gives up with the response as it is. A one-shot body is never
/// sent twice, a retry never waits past the request's deadline, and the wait ends at once when
/// the task is cancelled.
///
/// ```swift
/// let client = Client(configuration: .init(transport: transport) { $0.retry = .never })
/// var upload = PhotosAPI.create(photo)
/// upload.retryPolicy = .standard
/// // A POST is retried only with a key, which the server uses to apply it once.
/// upload.headers[HTTPField.Name("Idempotency-Key")!] = UUID().uuidString
/// ```
public struct RetryPolicy: Sendable, Hashable {
    /// The most attempts, the first included (1 never retries).
    public var maxAttempts: Int
    /// The backoff's base: the first retry waits up to this long.
    public var baseDelay: Duration
    /// The longest backoff wait.
    public var maxDelay: Duration
    /// The longest `Retry-After` honoured; a server asking for more is not retried.
    public var maxRetryAfter: Duration
    /// The statuses that are retried.
    public var retryableStatuses: Set<Int>
    /// The methods retried without an `Idempotency-Key`.
    public var idempotentMethods: Set<HTTPRequest.Method>

    /// Creates a policy.
    public init(
        maxAttempts: Int = 3,
        baseDelay: Duration = .milliseconds(200),
        maxDelay: Duration = .seconds(10),
        maxRetryAfter: Duration = .seconds(30),
        retryableStatuses: Set<Int> = [429, 502, 503, 504],
        idempotentMethods: Set<HTTPRequest.Method> = [.get, .head, .put, .delete, .options]
    ) {
        self.maxAttempts = max(1, maxAttempts)
        self.baseDelay = baseDelay
        self.maxDelay = maxDelay
        self.maxRetryAfter = maxRetryAfter
        self.retryableStatuses = retryableStatuses
        self.idempotentMethods = idempotentMethods
    }

    /// Three attempts, 200 ms base, 10 s cap, `Retry-After` up to 30 s (the client's default).
    public static let standard = RetryPolicy()
    /// One attempt: nothing is retried.
    public static let never = RetryPolicy(maxAttempts: 1)

    /// This policy with at most `attempts` attempts.
    public func attempts(_ attempts: Int) -> RetryPolicy {
        var copy = self
        copy.maxAttempts = max(1, attempts)
        return copy
    }

    /// What happened to one attempt, as the decision sees it.
    public enum AttemptResult: Sendable, Hashable {
        /// A response arrived with this status and `Retry-After` value.
        case status(Int, retryAfter: String?)
        /// The connection failed, or was closed before any byte of a response arrived.
        case connectionFailed
        /// The server refused the request without processing it (HTTP/2 REFUSED_STREAM, or a
        /// stream above a GOAWAY's last stream id): safe to send again whatever the method.
        case notProcessed
        /// Anything else (a timeout, TLS, a cancelled task, an error of a middleware): not retried.
        case other
    }

    /// The facts a decision is made from.
    public struct Attempt: Sendable, Hashable {
        /// The number of the attempt that just ended (1 for the first).
        public var number: Int
        /// The request's method.
        public var method: HTTPRequest.Method
        /// Whether the request carries an `Idempotency-Key` header field.
        public var hasIdempotencyKey: Bool
        /// Whether the body (if any) can be sent again: false for a one-shot stream already sent.
        public var bodyCanBeResent: Bool
        /// What happened.
        public var result: AttemptResult
        /// The time left until the request's deadline, if it has one.
        public var timeLeft: Duration?
        /// Now, to read a `Retry-After` date against.
        public var now: Date
        /// A random number in `0..<1`, for the jitter.
        public var jitter: Double

        /// Creates the facts of an attempt.
        public init(
            number: Int, method: HTTPRequest.Method, hasIdempotencyKey: Bool = false, bodyCanBeResent: Bool = true, result: AttemptResult,
            timeLeft: Duration? = nil, now: Date = Date(), jitter: Double = 0.5
        ) {
            self.number = number
            self.method = method
            self.hasIdempotencyKey = hasIdempotencyKey
            self.bodyCanBeResent = bodyCanBeResent
            self.result = result
            self.timeLeft = timeLeft
            self.now = now
            self.jitter = jitter
        }
    }

    /// What to do after an attempt.
    public enum Decision: Sendable, Hashable {
        /// Send again after waiting this long.
        case retry(after: Duration)
        /// Keep the result; the reason says why, for logs.
        case stop(reason: String)
    }

    /// Decides whether to send the request again, and when. A pure function of its input.
    public func decide(_ attempt: Attempt) -> Decision {
        guard attempt.number < self.maxAttempts else { return .stop(reason: "no attempts left") }
        guard attempt.bodyCanBeResent else { return .stop(reason: "the one-shot body was already sent") }
        let safe = self.idempotentMethods.contains(attempt.method) || attempt.hasIdempotencyKey
        var retryAfter: String?
        switch attempt.result {
        case .other:
            return .stop(reason: "not retryable")
        case .notProcessed:
            break
        case .connectionFailed:
            guard safe else { return .stop(reason: "\(attempt.method.rawValue) is not idempotent") }
        case .status(let status, let after):
            guard self.retryableStatuses.contains(status) else { return .stop(reason: "status \(status) is not retried") }
            guard safe else { return .stop(reason: "\(attempt.method.rawValue) is not idempotent") }
            retryAfter = after
        }
        let delay: Duration
        if let retryAfter, let wait = Self.retryAfter(retryAfter, now: attempt.now) {
            guard wait <= self.maxRetryAfter else { return .stop(reason: "Retry-After is longer than \(self.maxRetryAfter)") }
            delay = wait
        } else {
            delay = self.backoff(attempt: attempt.number, jitter: attempt.jitter)
        }
        if let left = attempt.timeLeft, delay >= left { return .stop(reason: "the deadline comes before the next attempt") }
        return .retry(after: delay)
    }

    /// Full jitter: a random share of `min(maxDelay, baseDelay × 2^(attempt−1))`.
    func backoff(attempt: Int, jitter: Double) -> Duration {
        // A number below 1 counts as 1 (`Int.min - 1` would overflow).
        let exponent = Double(min(max(attempt, 1) - 1, 62))
        let cap = min(self.maxDelay.inSeconds, self.baseDelay.inSeconds * pow(2, exponent))
        let share = jitter.isFinite ? min(max(jitter, 0), 1) : 0
        // A careless configuration (a maxDelay of centuries) must not trap: at most ~30 years.
        let milliseconds = min(max(cap, 0) * share * 1000, 1e12)
        return .milliseconds(Int64(milliseconds.isFinite ? milliseconds.rounded() : 0))
    }

    /// The wait a `Retry-After` value asks for (RFC 9110 §10.2.3): delay-seconds or an HTTP date;
    /// `nil` when it is neither. A date in the past is no wait; a huge number saturates.
    ///
    /// The field sent more than once arrives joined (`3600, 3600`: both transports join repeated
    /// fields with ", "): the same value each time is that value, different ones are none (a
    /// singleton field with several values is invalid, RFC 9110 §5.3).
    package static func retryAfter(_ value: String, now: Date) -> Duration? {
        if let wait = Self.oneRetryAfter(value, now: now) { return wait }
        let pieces = FieldText.split(value, at: ",").map(FieldText.trimmed)
        guard pieces.count > 1 else { return nil }
        // An HTTP date holds a comma itself: the repeated value may be more than one piece.
        for size in 1...(pieces.count / 2) where pieces.count % size == 0 {
            let first = pieces[0..<size]
            if stride(from: size, to: pieces.count, by: size).allSatisfy({ pieces[$0..<($0 + size)].elementsEqual(first) }) {
                return Self.oneRetryAfter(first.joined(separator: ", "), now: now)
            }
        }
        return nil
    }

    private static func oneRetryAfter(_ value: String, now: Date) -> Duration? {
        let text = value.trimmingCharacters(in: .whitespaces)
        // Digits only (leading zeros included: `0000000030` is 30 s); a huge value saturates.
        if let seconds = UntrustedNumber.digits(text, limit: 999_999_999) { return .seconds(Int64(seconds)) }
        guard let date = HTTPDate.parse(text) else { return nil }
        let interval = date.timeIntervalSince(now)
        guard interval.isFinite, interval > 0 else { return .zero }
        return .milliseconds(Int64(min(interval, 999_999_999) * 1000))
    }
}

/// Keeps retries to a share of requests over a sliding window, so an outage is not multiplied.
///
/// A retry is allowed while the retries in the last `window` stay within `ratio` of the
/// requests in it, plus `minimum` (so a quiet client can still retry).
final class RetryBudget: Sendable {
    private struct State {
        var current = (requests: 0, retries: 0)
        var previous = (requests: 0, retries: 0)
        var windowStart: ContinuousClock.Instant
    }

    let ratio: Double
    let minimum: Int
    let window: Duration
    private let state: Locked<State>

    init(ratio: Double = 0.1, minimum: Int = 10, window: Duration = .seconds(10)) {
        self.ratio = ratio
        self.minimum = minimum
        self.window = window
        self.state = Locked(State(windowStart: .now))
    }

    /// Counts a request.
    func recordRequest(now: ContinuousClock.Instant = .now) {
        self.state.withLock { state in
            self.roll(&state, now: now)
            state.current.requests += 1
        }
    }

    /// Takes a retry from the budget; `false` when the budget is spent.
    func tryRetry(now: ContinuousClock.Instant = .now) -> Bool {
        self.state.withLock { state in
            self.roll(&state, now: now)
            let requests = state.current.requests + state.previous.requests
            let retries = state.current.retries + state.previous.retries
            guard Double(retries) < Double(requests) * self.ratio + Double(self.minimum) else { return false }
            state.current.retries += 1
            return true
        }
    }

    private func roll(_ state: inout State, now: ContinuousClock.Instant) {
        let elapsed = now - state.windowStart
        guard elapsed >= self.window else { return }
        state.previous = elapsed >= self.window * 2 ? (0, 0) : state.current
        state.current = (0, 0)
        state.windowStart = now
    }
}
