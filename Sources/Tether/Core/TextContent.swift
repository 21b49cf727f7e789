extension Request {
    /// Creates a request whose content is `text` as UTF-8: for peers that speak text (the
    /// `lines` profile, a command protocol).
    ///
    /// - Parameters:
    ///   - type: The request type.
    ///   - text: The content.
    public init(type: UInt32, text: String) {
        self.init(type: type, payload: Array(text.utf8))
    }
}

extension Response {
    /// Creates a response whose content is `text` as UTF-8.
    ///
    /// - Parameter text: The content.
    public init(text: String) {
        self.init(payload: Array(text.utf8))
    }
}

extension Frame {
    /// Creates a frame, such as a push, whose content is `text` as UTF-8.
    ///
    /// - Parameters:
    ///   - type: The frame type.
    ///   - text: The content.
    public init(type: UInt32, text: String) {
        self.init(type: type, payload: Array(text.utf8))
    }
}

extension Response {
    /// What a server handler returns to answer nothing: for a request whose sender does not
    /// wait for an answer (sent with ``Connection/send(_:)``, say). No frame goes out, and
    /// ``PeerMetrics/requestsHandled`` does not count it; a client that does wait for an
    /// answer ends by its timeout. In profiles that answer in order (no serial), every
    /// request is owed a reply to keep the rest matched: there the server sends an empty
    /// response instead.
    public static var noReply: Response {
        var response = Response()
        response.isNoReply = true
        return response
    }
}
