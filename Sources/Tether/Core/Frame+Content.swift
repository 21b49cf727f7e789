extension Frame {
    /// The payload as UTF-8 text, with invalid bytes replaced.
    public var text: String { String(decoding: payload, as: UTF8.self) }
}
