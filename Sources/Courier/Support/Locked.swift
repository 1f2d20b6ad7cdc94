import Foundation

/// A value guarded by a lock, shareable across tasks.
///
/// `Synchronization.Mutex` needs macOS 15 / iOS 18; this box works on every supported platform.
/// Every access to `value` goes through `withLock`, so the class is safe to share: that is why
/// it may be declared `@unchecked Sendable`.
///
/// Not for a value of no size (`Locked(())`): that value shares its address with the lock, so
/// ThreadSanitizer reads each `withLock` as a write racing the next caller's read of the lock.
/// A lock that guards no value is an `NSLock`.
package final class Locked<Value: Sendable>: @unchecked Sendable {
    private var value: Value
    private let lock = NSLock()

    package init(_ value: Value) { self.value = value }

    /// Runs `body` with exclusive access to the value.
    @discardableResult
    package func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        self.lock.lock()
        defer { self.lock.unlock() }
        return try body(&self.value)
    }

    /// A copy of the current value.
    package var current: Value { self.withLock { $0 } }
}
