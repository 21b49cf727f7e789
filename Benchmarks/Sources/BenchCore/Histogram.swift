/// A log-linear latency histogram in nanoseconds: exact below 128 ns, then 64 buckets per
/// power of two (a relative error under 1.6 %). Fixed size, no allocation per sample.
///
/// `Benchmarks/c/client.c` uses the same buckets, so percentiles from every client are
/// quantized the same way.
public struct Histogram: Sendable {
    static let bucketCount = 64 * 58 + 128

    private var buckets: [UInt64]
    /// Number of samples recorded.
    public private(set) var count: UInt64 = 0
    /// The largest sample recorded, in nanoseconds.
    public private(set) var maximum: UInt64 = 0

    /// An empty histogram.
    public init() {
        buckets = [UInt64](repeating: 0, count: Self.bucketCount)
    }

    @inline(__always)
    static func index(of value: UInt64) -> Int {
        if value < 128 { return Int(value) }
        let exponent = (63 - value.leadingZeroBitCount) - 6
        return 64 * exponent + Int(value >> UInt64(exponent))
    }

    /// The value a bucket stands for: the middle of its range.
    static func value(at index: Int) -> UInt64 {
        if index < 128 { return UInt64(index) }
        let exponent = index / 64 - 1
        let mantissa = UInt64(index - 64 * exponent)
        return (mantissa << UInt64(exponent)) + (UInt64(1) << UInt64(exponent)) / 2
    }

    /// Records one sample.
    ///
    /// - Parameter nanoseconds: The sample.
    @inline(__always)
    public mutating func record(_ nanoseconds: UInt64) {
        buckets[Self.index(of: nanoseconds)] &+= 1
        count &+= 1
        if nanoseconds > maximum { maximum = nanoseconds }
    }

    /// Adds every sample of `other`.
    ///
    /// - Parameter other: Another histogram.
    public mutating func merge(_ other: Histogram) {
        for index in 0..<Self.bucketCount { buckets[index] &+= other.buckets[index] }
        count &+= other.count
        maximum = max(maximum, other.maximum)
    }

    /// The sample at a quantile, in nanoseconds; 0 when empty.
    ///
    /// - Parameter quantile: Between 0 and 1, such as 0.99.
    /// - Returns: The value of the bucket that holds that sample.
    public func value(atQuantile quantile: Double) -> UInt64 {
        guard count > 0 else { return 0 }
        let rank = max(1, UInt64((quantile * Double(count)).rounded(.up)))
        var seen: UInt64 = 0
        for index in 0..<Self.bucketCount {
            seen &+= buckets[index]
            if seen >= rank { return min(Self.value(at: index), maximum) }
        }
        return maximum
    }
}
