import Crypto
import Foundation
import HTTPTypes

/// An endpoint without its response type: what the stages need to know about it.
///
/// A class, made once per call: the stages pass it along with one reference instead of copying
/// twenty fields at every step.
final class EndpointDescription: Sendable {
    let name: String
    let hasOwnName: Bool
    let method: HTTPRequest.Method
    let path: String
    let query: [URLQueryItem]
    let headers: HTTPFields
    let rawHeaders: [(name: String, value: String)]
    let body: EndpointBody?
    let acceptedStatuses: Range<Int>
    let timeout: Duration?
    let middleware: [any Middleware]
    let priority: RequestPriority
    let deduplication: Deduplication
    let compressesRequestBody: Bool
    let cachePolicy: CachePolicy?
    let retryPolicy: RetryPolicy?
    let isPrefetch: Bool
    let service: ServiceID?
    let wire: (any WireProtocol)?
    let operation: String?
    let isNotification: Bool
    let staysOnOrigin: Bool
    let decoding: ErasedDecoding

    init<Value>(_ endpoint: Endpoint<Value>, decoding: ErasedDecoding, acceptedStatuses: Range<Int>? = nil) {
        self.name = endpoint.name
        self.hasOwnName = endpoint.hasOwnName
        self.method = endpoint.method
        self.path = endpoint.path
        self.query = endpoint.query
        self.headers = endpoint.headers
        self.rawHeaders = endpoint.rawHeaders
        self.body = endpoint.body
        self.acceptedStatuses = acceptedStatuses ?? endpoint.acceptedStatuses
        self.timeout = endpoint.timeout
        self.middleware = endpoint.middleware
        self.priority = endpoint.priority
        self.deduplication = endpoint.deduplication
        self.compressesRequestBody = endpoint.compressesRequestBody
        self.cachePolicy = endpoint.cachePolicy
        self.retryPolicy = endpoint.retryPolicy
        self.isPrefetch = endpoint.isPrefetch
        self.service = endpoint.service
        self.wire = endpoint.wire
        self.operation = endpoint.operation
        self.isNotification = endpoint.isNotification
        self.staysOnOrigin = endpoint.staysOnOrigin
        self.decoding = decoding
    }

    /// A copy of `other` with these settings replaced (a service's defaults applied).
    init(
        copying other: EndpointDescription, headers: HTTPFields, middleware: [any Middleware], timeout: Duration?,
        retryPolicy: RetryPolicy?, cachePolicy: CachePolicy?
    ) {
        self.name = other.name
        self.hasOwnName = other.hasOwnName
        self.method = other.method
        self.path = other.path
        self.query = other.query
        self.headers = headers
        self.rawHeaders = other.rawHeaders
        self.body = other.body
        self.acceptedStatuses = other.acceptedStatuses
        self.timeout = timeout
        self.middleware = middleware
        self.priority = other.priority
        self.deduplication = other.deduplication
        self.compressesRequestBody = other.compressesRequestBody
        self.cachePolicy = cachePolicy
        self.retryPolicy = retryPolicy
        self.isPrefetch = other.isPrefetch
        self.service = other.service
        self.wire = other.wire
        self.operation = other.operation
        self.isNotification = other.isNotification
        self.staysOnOrigin = other.staysOnOrigin
        self.decoding = other.decoding
    }
}

extension EndpointDescription {
    /// `endpoint` without its response type. (A function generic over the value type rather
    /// than a property of `Endpoint`: calling a member of `Endpoint<Value>` where `Value` is not
    /// known at compile time looks the endpoint type's metadata up, on every request.)
    static func erasing<Value: Sendable>(_ endpoint: Endpoint<Value>) -> EndpointDescription {
        EndpointDescription(endpoint, decoding: ErasedDecoding(endpoint.decoding))
    }
}

extension Endpoint {
    /// The endpoint without its response type, decoded by `decoding`.
    func erased(decoding: ErasedDecoding, acceptedStatuses: Range<Int>? = nil) -> EndpointDescription {
        EndpointDescription(self, decoding: decoding, acceptedStatuses: acceptedStatuses)
    }
}
