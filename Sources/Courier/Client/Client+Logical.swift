import Foundation
import HTTPTypes

extension Client {
    /// The logical request an endpoint builds on this client — URL, the client's, the service's
    /// and the endpoint's header fields, the encoded body — without sending it (a durable outbox
    /// stores it).
    package func logicalRequest<Value: Sendable>(for endpoint: Endpoint<Value>) throws -> Request {
        try RequestBuilder.build(self.configuration.withServiceDefaults(EndpointDescription.erasing(endpoint)), parts: self.parts)
    }

    /// The names of the header fields the client's and the endpoint's service's defaults give a
    /// request of this endpoint, less the endpoint's own: what a stored request leaves out, so the
    /// defaults of the day it is sent apply (a rotated credential, never the one of the day it
    /// was stored, and never one written to disk).
    package func defaultFieldNames<Value: Sendable>(for endpoint: Endpoint<Value>) -> Set<HTTPField.Name> {
        var names = Set(self.configuration.defaultHeaders.map(\.name))
        if let service = endpoint.service, let defaults = self.configuration.serviceDefaults[service] {
            names.formUnion(defaults.headers.map(\.name))
        }
        for field in endpoint.headers { names.remove(field.name) }
        return names
    }

    /// Whether the endpoint goes on the wire as built (REST), with no wire protocol boxing each call.
    package func sendsAsREST<Value: Sendable>(_ endpoint: Endpoint<Value>) -> Bool {
        RequestBuilder.wireIdentity(of: EndpointDescription.erasing(endpoint), configuration: self.configuration).isEmpty
    }
}
