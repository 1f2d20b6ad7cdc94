import Courier
import HTTPTypes
import Testing

/// `Request.deadline` is stored as a time since a fixed instant (a fixed-layout value); what is
/// set is what is read back, to the attosecond, and a timeout becomes a deadline that far ahead.
@Suite("Request deadlines")
struct RequestDeadlineTests {
    static func request(timeout: Duration? = nil) -> Request {
        Request(head: HTTPRequest(method: .get, scheme: "https", authority: "example.com", path: "/"), timeout: timeout)
    }

    @Test
    func aDeadlineSetIsTheDeadlineRead() {
        var request = Self.request()
        #expect(request.deadline == nil)
        #expect(request.remainingTime == nil)
        let now = ContinuousClock.now
        for instant in [
            now, now + .nanoseconds(1), now - .seconds(3600), now + .seconds(86_400 * 365),
            now + Duration(secondsComponent: 0, attosecondsComponent: 1),
        ] {
            request.deadline = instant
            #expect(request.deadline == instant)
        }
        request.deadline = nil
        #expect(request.deadline == nil)
    }

    @Test
    func aTimeoutBecomesADeadlineThatFarAhead() throws {
        let before = ContinuousClock.now
        let request = Self.request(timeout: .seconds(30))
        let after = ContinuousClock.now
        let deadline = try #require(request.deadline)
        #expect(deadline >= before + .seconds(30))
        #expect(deadline <= after + .seconds(30))
        let left = try #require(request.remainingTime)
        #expect(left > .seconds(29) && left <= .seconds(30))
        // A deadline in the past leaves no time, never a negative one.
        var late = request
        late.deadline = before - .seconds(1)
        #expect(late.remainingTime == .zero)
    }
}
