extension Duration {
    /// The duration in seconds, as a floating-point number.
    package var inSeconds: Double {
        let (seconds, attoseconds) = self.components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}
