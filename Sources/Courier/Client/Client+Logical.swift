import Foundation
import HTTPTypes

extension Client {
    /// The logical request an endpoint builds on this client — URL, the client's, the service's
    /// and the endpoint's header fields, the encoded body — without sending it (a durable outbox
    /// stores it).
    package func logicalRequest<Value: Sendable>(for endpoint: Endpoint<Value>) throws -> Request {
        try RequestBuilder.build(self.configuration.withServiceDefaults(EndpointDescription.erasing(endpoint)), parts: self.parts)
    }

    /// The header fields, name and value, the client's and the endpoint's service's defaults
    /// give a request of this endpoint: what a stored request leaves out, so the defaults of the
    /// day it is sent apply (a rotated credential, never the one of the day it was stored, and
    /// never one written to disk). A field of the request with another value — the endpoint's
    /// own, or one the build derived (a compressed body's `Content-Encoding`) — is no default's.
    package func defaultFields<Value: Sendable>(for endpoint: Endpoint<Value>) -> Set<HTTPField> {
        var fields = Set(self.configuration.defaultHeaders)
        if let service = endpoint.service, let defaults = self.configuration.serviceDefaults[service] {
            fields.formUnion(defaults.headers)
        }
        // A name the endpoint sets is the endpoint's, whatever the value (the build replaced the
        // defaults of that name with it).
        var own = Set(endpoint.headers.map(\.name))
        for (name, _) in endpoint.rawHeaders { if let parsed = HTTPField.Name(name) { own.insert(parsed) } }
        return fields.filter { !own.contains($0.name) }
    }

    /// Whether the endpoint goes on the wire as built (REST), with no wire protocol boxing each call.
    package func sendsAsREST<Value: Sendable>(_ endpoint: Endpoint<Value>) -> Bool {
        RequestBuilder.wireIdentity(of: EndpointDescription.erasing(endpoint), configuration: self.configuration).isEmpty
    }
}
