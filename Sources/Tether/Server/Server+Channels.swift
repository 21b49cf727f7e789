// Publishing to channels (ServerConfiguration.channels).

extension Server {
    /// Publishes `content` to `channel`: every subscriber gets it, in the order of the
    /// channel's offsets, and the channel's history keeps it for subscribers that come back.
    ///
    /// The message gets the channel's next offset, is encoded once, and is queued for every
    /// subscriber's event loop before the call returns; the call does not wait for the
    /// sockets. Messages of one channel reach each subscriber in offset order, from any
    /// number of threads publishing at once. A subscriber whose outbound bytes would pass
    /// ``Limits/maximumOutboundBytes`` misses the message; its client sees the offset it
    /// missed and recovers it from the history, or is told that the history no longer has it.
    ///
    /// The channel is made by its first publication or subscription. A message larger than
    /// ``ChannelConfiguration/maximumHistoryBytesPerChannel``, or one that does not fit in
    /// ``ChannelConfiguration/maximumHistoryBytes``, is written but not kept.
    ///
    /// - Parameters:
    ///   - content: The message's bytes.
    ///   - channel: The channel's name (see ``ChannelConfiguration``).
    /// - Returns: The message's offset in the channel.
    /// - Throws: ``TetherError/Code/invalidArgument`` when the server has no
    ///   ``ServerConfiguration/channels``, the name is not a channel name, the channel is new
    ///   and ``ChannelConfiguration/maximumChannels`` are kept already, or the profile's
    ///   codec cannot encode the message (a content over ``Limits/maximumPayloadLength``).
    @discardableResult
    public func publish(_ content: [UInt8], to channel: String) throws(TetherError) -> UInt64 {
        guard let channelHub else {
            throw TetherError(code: .invalidArgument, message: "this server has no channels: set ServerConfiguration.channels")
        }
        return try channelHub.publish(content, to: channel)
    }

    /// Publishes a JSON value to `channel`, as ``publish(_:to:)`` publishes bytes.
    ///
    /// - Parameters:
    ///   - json: The message.
    ///   - channel: The channel's name.
    /// - Returns: The message's offset in the channel.
    /// - Throws: What ``publish(_:to:)`` throws.
    @discardableResult
    public func publish(json: JSONValue, to channel: String) throws(TetherError) -> UInt64 {
        try publish(json.encoded, to: channel)
    }
}
