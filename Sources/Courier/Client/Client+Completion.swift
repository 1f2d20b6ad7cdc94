import Foundation

extension Client {
    /// Sends an endpoint and calls `completion` on `queue` (the main queue by default), for code
    /// not yet on async/await.
    ///
    /// Returns a handle whose `cancel()` cancels the request; after it, `completion` is not called.
    ///
    /// ```swift
    /// let handle = client.send(NewsAPI.article(id: 42)) { result in
    ///     switch result { case .success(let article): show(article); case .failure(let error): report(error) }
    /// }
    /// ```
    @discardableResult
    public func send<Value: Sendable>(
        _ endpoint: Endpoint<Value>,
        queue: DispatchQueue = .main,
        completion: @escaping @Sendable (Result<Value, CourierError>) -> Void
    ) -> RequestHandle<Value> {
        let handle = self.start(endpoint)
        Task {
            let result: Result<Value, CourierError>
            do {
                result = .success(try await handle.value)
            } catch {
                result = .failure(CourierError.wrap(error))
            }
            queue.async {
                guard !handle.isCancelled else { return }
                completion(result)
            }
        }
        return handle
    }
}
