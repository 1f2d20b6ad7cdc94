import Foundation

extension Client {
    /// Cache-then-network: the stored response, however old, then the network's.
    ///
    /// The sequence yields the cached value first (``Response/source`` `.cache`, with its
    /// ``Response/age``) when one is stored, then the fresh one (`.network`), which replaces the
    /// stored entry; only the fresh one when nothing is stored. A network failure ends the
    /// sequence with the error, after the cached value. Cancelling the iterating task cancels
    /// the request.
    public func updates<Value: Sendable>(_ endpoint: Endpoint<Value>) -> AsyncThrowingStream<Response<Value>, any Error> {
        // Numbered and holding its lifecycle ticket from now, as a started request does.
        let control = self.startedControl(priority: endpoint.priority)
        let lifecycle = self.parts.lifecycle
        return AsyncThrowingStream { continuation in
            let task = Task {
                defer { control.endTicket(in: lifecycle) }
                if let cached = self.cachedResponse(endpoint) {
                    continuation.yield(cached)
                }
                do {
                    var reload = CachePolicy(mode: .reload)
                    let policy = self.configuration.withServiceDefaults(EndpointDescription.erasing(endpoint)).cachePolicy
                    if (policy ?? self.configuration.cache.policy).cachesAnyMethod { reload = reload.allowingAnyMethod() }
                    continuation.yield(try await self.response(endpoint, control: control, policyOverride: reload))
                    continuation.finish()
                } catch {
                    continuation.finish(throwing: error)
                }
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    /// The stored response for an endpoint, however old, decoded; `nil` when none is stored or it does not decode.
    private func cachedResponse<Value: Sendable>(_ endpoint: Endpoint<Value>) -> Response<Value>? {
        // With the service's defaults (its header fields, its cache policy), as the network half
        // applies them: the lookup must find what that half stores.
        let description = self.configuration.withServiceDefaults(EndpointDescription.erasing(endpoint))
        guard let cache = self.parts.cache, let request = try? RequestBuilder.build(description, parts: self.parts),
            var hit = cache.anyStored(
                for: request, policy: description.cachePolicy ?? self.configuration.cache.policy,
                wire: RequestBuilder.wireIdentity(of: description, configuration: self.configuration)),
            // Another endpoint's stored status this one does not accept is not its answer.
            description.acceptedStatuses.contains(hit.response.statusCode),
            let value = try? description.decoding.run(hit.body, hit.response.head, self.configuration.decoder, nil)
        else { return nil }
        hit.value = value
        hit.urlString = request.urlString
        let events = self.parts.events
        if events.isActive {
            events.emit(request) { $0.requestStarted($1) }
            events.emit(request) { $0.cacheHit($1, source: .cache, age: hit.age ?? 0) }
            let result = EventHub.result(
                response: hit.response.head, body: hit.body, bodySize: hit.body.count, version: nil, source: .cache, age: hit.age,
                start: .now, url: request.urlString, record: ExchangeRecord(), delivery: .collected
            )
            events.emit(request) { $0.requestFinished($1, result: result) }
        }
        return try? ResponseDelivery.response(hit, as: Value.self)
    }
}
