import Foundation
import HTTPTypes

/// What every endpoint of one service gets without repeating it: middleware (auth for one
/// backend, signing for another), header fields, a timeout, a retry policy and a cache policy.
///
/// ```swift
/// $0.serviceDefaults[.payments] = ServiceDefaults(middleware: [signer], headers: [.init("X-Api")!: "2"], timeout: .seconds(10))
/// let charge = Endpoint<Receipt>(method: .post, path: "/charges", body: .json(order)).service(.payments)
/// ```
///
/// An endpoint's own settings win: its header fields replace the service's of the same name, its
/// timeout, retry and cache policies replace the service's, and its middleware runs after the
/// service's (which runs after the client's). An endpoint of the service whose absolute URL names
/// another origin than the service's server gets neither the service's middleware nor its
/// fields that carry credentials. TLS pins stay per host, on the transport
/// (`PinningPolicy`): a service's hosts are the ones its server directory entries name.
public struct ServiceDefaults: Sendable {
    /// Middleware for the service's endpoints, after the client's and before the endpoint's own.
    public var middleware: [any Middleware]
    /// Header fields for the service's endpoints, after the client's defaults.
    public var headers: HTTPFields
    /// The timeout of the service's endpoints that set none.
    public var timeout: Duration?
    /// The retry policy of the service's endpoints that set none.
    public var retry: RetryPolicy?
    /// The cache policy of the service's endpoints that set none.
    public var cachePolicy: CachePolicy?

    /// Creates defaults for a service.
    public init(
        middleware: [any Middleware] = [], headers: HTTPFields = [:], timeout: Duration? = nil,
        retry: RetryPolicy? = nil, cachePolicy: CachePolicy? = nil
    ) {
        self.middleware = middleware
        self.headers = headers
        self.timeout = timeout
        self.retry = retry
        self.cachePolicy = cachePolicy
    }
}

extension EndpointDescription {
    /// The endpoint with its service's defaults applied under its own settings.
    func applying(_ defaults: ServiceDefaults) -> EndpointDescription {
        var headers = defaults.headers
        for field in self.headers { headers[field.name] = nil }
        // A service's `Content-Type` is a default, as the client's is: a body's own type wins
        // over it (``RequestBuilder/bodyTypeWins(_:over:)``).
        if let serviceType = headers[.contentType], let bodyType = self.body?.declaredContentType,
            RequestBuilder.bodyTypeWins(bodyType, over: serviceType)
        {
            headers[.contentType] = nil
        }
        headers.append(contentsOf: self.headers)
        return EndpointDescription(
            copying: self, headers: headers, middleware: defaults.middleware + self.middleware,
            timeout: self.timeout ?? defaults.timeout, retryPolicy: self.retryPolicy ?? defaults.retry,
            cachePolicy: self.cachePolicy ?? defaults.cachePolicy
        )
    }
}

extension Client.Configuration {
    /// The endpoint with its service's ``ServiceDefaults`` applied, if it has a service with some.
    func withServiceDefaults(_ endpoint: EndpointDescription) -> EndpointDescription {
        guard let service = endpoint.service, var defaults = self.serviceDefaults[service] else { return endpoint }
        // An absolute URL to another origin than the service's: the service's fields that carry
        // credentials stay home (as on a redirect to another origin, RFC 9110 §15.4), and so does
        // its middleware — its signer or authenticator would sign or authorise a request for
        // another party.
        // The same home as the build's (``RequestBuilder/home(of:in:clientBase:)``): a service
        // whose base cannot be told (not in the active environment) has none, and anywhere is
        // elsewhere; a client with neither a directory nor a base URL has no home for anything,
        // and its defaults go, as the app set them.
        if RequestBuilder.isAbsoluteHTTP(endpoint.path), let url = URL(string: RequestBuilder.escapingTarget(ofAbsolute: endpoint.path)),
            let target = BaseURL(url),
            RequestBuilder.home(of: service, in: self.servers, clientBase: self.baseURL.flatMap(BaseURL.init)).isElsewhere(target)
        {
            defaults.headers = self.redirects.withoutSecrets(defaults.headers, redactor: self.redactor)
            defaults.middleware = []
        }
        return endpoint.applying(defaults)
    }
}
