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
        // One task, as `start` makes: the request runs in it, and it hands the result to
        // `completion` (no second task awaiting the first).
        let lifecycle = self.parts.lifecycle
        let (task, control) = self.inOwnTask(priority: endpoint.priority) { control in
            let result: Result<Response<Value>, CourierError>
            do {
                result = .success(try await self.response(endpoint, control: control))
            } catch {
                result = .failure(CourierError.wrap(error))
            }
            // Ended before `completion` runs, as when it awaited the started request.
            control.endTicket(in: lifecycle)
            queue.async {
                guard !control.isCancelledByCaller else { return }
                completion(result.map(\.value))
            }
            return try result.get()
        }
        return RequestHandle(task: task, control: control)
    }
}
