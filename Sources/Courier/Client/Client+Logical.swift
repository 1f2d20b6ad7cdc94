import Foundation

extension Client {
    /// The logical request an endpoint builds on this client — URL, the client's, the service's
    /// and the endpoint's header fields, the encoded body — without sending it (a durable outbox
    /// stores it).
    package func logicalRequest<Value: Sendable>(for endpoint: Endpoint<Value>) throws -> Request {
        try RequestBuilder.build(self.configuration.withServiceDefaults(EndpointDescription.erasing(endpoint)), parts: self.parts)
    }

    /// Whether the endpoint goes on the wire as built (REST), with no wire protocol boxing each call.
    package func sendsAsREST<Value: Sendable>(_ endpoint: Endpoint<Value>) -> Bool {
        RequestBuilder.wireIdentity(of: EndpointDescription.erasing(endpoint), configuration: self.configuration).isEmpty
    }
}
