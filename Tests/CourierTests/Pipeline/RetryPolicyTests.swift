import Foundation
import Testing

@testable import Courier

/// The retry decision is a pure function of its facts: tested without sockets.
@Suite("Retry decisions are plain values")
struct RetryPolicyTests {
    let policy = RetryPolicy.standard
    let now = Date(timeIntervalSince1970: 1_700_000_000)

    func decide(
        _ result: RetryPolicy.AttemptResult, method: HTTPRequest.Method = .get, number: Int = 1, key: Bool = false,
        resendable: Bool = true, timeLeft: Duration? = nil, jitter: Double = 0.5, policy: RetryPolicy? = nil
    ) -> RetryPolicy.Decision {
        (policy ?? self.policy).decide(
            RetryPolicy.Attempt(
                number: number, method: method, hasIdempotencyKey: key, bodyCanBeResent: resendable, result: result,
                timeLeft: timeLeft, now: self.now, jitter: jitter
            ))
    }

    func isRetry(_ decision: RetryPolicy.Decision) -> Bool {
        if case .retry = decision { return true }
        return false
    }

    @Test(arguments: [HTTPRequest.Method.get, .head, .put, .delete, .options])
    func idempotentMethodsAreRetriedOnConnectionFailuresAndRetryableStatuses(_ method: HTTPRequest.Method) {
        #expect(self.isRetry(self.decide(.connectionFailed, method: method)))
        for status in [429, 502, 503, 504] {
            #expect(self.isRetry(self.decide(.status(status, retryAfter: nil), method: method)))
        }
    }

    @Test
    func otherStatusesAndOtherFailuresAreNotRetried() {
        for status in [200, 304, 400, 401, 404, 500, 501] {
            #expect(!self.isRetry(self.decide(.status(status, retryAfter: nil))))
        }
        #expect(!self.isRetry(self.decide(.other)))
    }

    @Test
    func postAndPatchAreRetriedOnlyWithAnIdempotencyKeyOrWhenTheServerDidNotProcessThem() {
        for method in [HTTPRequest.Method.post, .patch] {
            #expect(!self.isRetry(self.decide(.status(503, retryAfter: nil), method: method)))
            #expect(!self.isRetry(self.decide(.connectionFailed, method: method)))
            #expect(self.isRetry(self.decide(.status(503, retryAfter: nil), method: method, key: true)))
            #expect(self.isRetry(self.decide(.connectionFailed, method: method, key: true)))
            // HTTP/2 REFUSED_STREAM: the server guarantees nothing was processed.
            #expect(self.isRetry(self.decide(.notProcessed, method: method)))
        }
    }

    @Test
    func aOneShotBodyThatWasSentIsNeverSentAgain() {
        #expect(
            self.decide(.status(503, retryAfter: nil), method: .put, resendable: false)
                == .stop(reason: "the one-shot body was already sent"))
        #expect(self.decide(.notProcessed, method: .post, resendable: false) == .stop(reason: "the one-shot body was already sent"))
    }

    @Test
    func attemptsStopAtTheMaximum() {
        #expect(self.isRetry(self.decide(.connectionFailed, number: 2)))
        #expect(self.decide(.connectionFailed, number: 3) == .stop(reason: "no attempts left"))
        #expect(self.decide(.connectionFailed, policy: .never) == .stop(reason: "no attempts left"))
        #expect(RetryPolicy(maxAttempts: -5).maxAttempts == 1)
    }

    @Test
    func backoffIsExponentialWithFullJitterAndCapped() {
        // Full jitter: a share `jitter` of min(maxDelay, base × 2^(n−1)).
        #expect(self.decide(.connectionFailed, number: 1, jitter: 1) == .retry(after: .milliseconds(200)))
        #expect(self.decide(.connectionFailed, number: 2, jitter: 1, policy: self.policy.attempts(10)) == .retry(after: .milliseconds(400)))
        #expect(
            self.decide(.connectionFailed, number: 3, jitter: 0.5, policy: self.policy.attempts(10)) == .retry(after: .milliseconds(400)))
        #expect(self.decide(.connectionFailed, number: 1, jitter: 0) == .retry(after: .zero))
        // Never past maxDelay, however many attempts; hostile jitter values are clamped.
        #expect(self.decide(.connectionFailed, number: 60, jitter: 1, policy: self.policy.attempts(100)) == .retry(after: .seconds(10)))
        #expect(self.decide(.connectionFailed, number: 1, jitter: .infinity) == .retry(after: .zero))
        #expect(self.decide(.connectionFailed, number: 1, jitter: -3) == .retry(after: .zero))
        // A careless configuration never traps.
        let careless = RetryPolicy(maxAttempts: 5, baseDelay: .seconds(Int64.max / 2), maxDelay: .seconds(Int64.max))
        #expect(self.decide(.connectionFailed, number: 4, jitter: 1, policy: careless) == .retry(after: .milliseconds(1_000_000_000_000)))
    }

    /// RFC 9110 §10.2.3: Retry-After is delay-seconds or an HTTP-date.
    @Test
    func retryAfterInSecondsOrAsADateIsHonouredUpToTheCap() {
        #expect(self.decide(.status(503, retryAfter: "7")) == .retry(after: .seconds(7)))
        #expect(self.decide(.status(429, retryAfter: " 0 ")) == .retry(after: .zero))
        let date = HTTPDateFormatting.imf(self.now.addingTimeInterval(12))
        #expect(self.decide(.status(503, retryAfter: date)) == .retry(after: .seconds(12)))
        // A date in the past: no wait.
        #expect(self.decide(.status(503, retryAfter: HTTPDateFormatting.imf(self.now.addingTimeInterval(-60)))) == .retry(after: .zero))
        // Longer than the cap (30 s by default): the response is kept, not waited for.
        #expect(self.decide(.status(503, retryAfter: "31")) == .stop(reason: "Retry-After is longer than 30.0 seconds"))
        // Huge and hostile values never trap; they are past any cap.
        #expect(!self.isRetry(self.decide(.status(503, retryAfter: "99999999999999999999999999"))))
        // delay-seconds is 1*DIGIT: leading zeros change nothing, however many there are.
        #expect(self.decide(.status(503, retryAfter: "0000000030")) == .retry(after: .seconds(30)))
        #expect(self.decide(.status(503, retryAfter: "00000000000000000000007")) == .retry(after: .seconds(7)))
        // Not a number and not a date: the backoff applies.
        #expect(self.decide(.status(503, retryAfter: "soon"), jitter: 1) == .retry(after: .milliseconds(200)))
        #expect(self.decide(.status(503, retryAfter: "-5"), jitter: 1) == .retry(after: .milliseconds(200)))
        #expect(self.decide(.status(503, retryAfter: "1.5"), jitter: 1) == .retry(after: .milliseconds(200)))
    }

    @Test
    func aWaitThatWouldPassTheDeadlineIsNotTaken() {
        #expect(
            self.decide(.status(503, retryAfter: "5"), timeLeft: .seconds(4)) == .stop(reason: "the deadline comes before the next attempt")
        )
        #expect(self.decide(.status(503, retryAfter: "5"), timeLeft: .seconds(6)) == .retry(after: .seconds(5)))
    }

    @Test
    func theBudgetKeepsRetriesToAShareOfRequests() {
        let budget = RetryBudget(ratio: 0.1, minimum: 2, window: .seconds(10))
        let t0 = ContinuousClock.now
        for _ in 0..<10 { budget.recordRequest(now: t0) }
        // 10% of 10 requests plus the minimum of 2: three retries, then none.
        #expect(budget.tryRetry(now: t0))
        #expect(budget.tryRetry(now: t0))
        #expect(budget.tryRetry(now: t0))
        #expect(!budget.tryRetry(now: t0))
        // Two windows later the old counts are gone.
        #expect(budget.tryRetry(now: t0 + .seconds(25)))
    }
}

/// IMF-fixdate text for tests.
enum HTTPDateFormatting {
    static func imf(_ date: Date) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return formatter.string(from: date)
    }
}
