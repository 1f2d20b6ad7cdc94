import Foundation
import Testing

@testable import Courier

/// RFC 9110 §15: a status code is three digits; both transports apply this one rule.
@Suite("The status rule both transports apply")
struct StatusCodeRuleTests {
    @Test(arguments: [100, 200, 599, 999])
    func threeDigitCodesAreStatuses(_ code: Int) throws {
        #expect(try StatusCode.checked(code).code == code)
    }

    @Test(arguments: [Int.min, -1, 0, 99, 1000, Int.max])
    func anythingElseIsAMalformedResponse(_ code: Int) {
        #expect(throws: CourierError.self) { try StatusCode.checked(code) }
        #expect((try? StatusCode.checked(code)) == nil)
    }
}
