/// A fixed instant of the process that stored times are kept relative to.
///
/// `ContinuousClock.Instant` is not a frozen type of the standard library, so a struct that
/// stores one has a size known only at run time: every copy, move and destroy of it goes through
/// the runtime's generic value witnesses, and every async function with such a local allocates it
/// from its task on entry. A `Duration` since this instant has a fixed layout.
package enum FixedInstant {
    /// The instant times are stored relative to (the first time it is read).
    package static let reference = ContinuousClock.now

    /// `instant` as the time since ``reference``.
    package static func offset(of instant: ContinuousClock.Instant) -> Duration {
        self.reference.duration(to: instant)
    }

    /// The instant `offset` after ``reference``.
    package static func instant(at offset: Duration) -> ContinuousClock.Instant {
        self.reference.advanced(by: offset)
    }
}
