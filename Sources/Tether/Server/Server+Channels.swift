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
    /// On a node of a cluster whose engine has channels (``SessionCluster/channels``), the
    /// engine gives the offset and keeps the message, and the call returns once it has:
    /// every node writes the channel's messages in the same order, whichever node or
    /// backend published them.
    ///
    /// The channel is made by its first publication or subscription. A message larger than
    /// ``ChannelConfiguration/maximumHistoryBytesPerChannel``, or one that does not fit in
    /// ``ChannelConfiguration/maximumHistoryBytes``, is written but not kept.
    ///
    /// A message with a `timeToLive` is written to the subscribers there are, and kept; a
    /// subscriber that recovers it from the history after its time has passed gets its
    /// offset skipped instead of the message.
    ///
    /// - Parameters:
    ///   - content: The message's bytes.
    ///   - channel: The channel's name (see ``ChannelConfiguration``).
    ///   - timeToLive: How long the message may be delivered; `nil`, the default, for as
    ///     long as the history keeps it.
    /// - Returns: The message's offset in the channel.
    /// - Throws: ``TetherError/Code/invalidArgument`` when the server has no
    ///   ``ServerConfiguration/channels``, the name is not a channel name, the channel is new
    ///   and ``ChannelConfiguration/maximumChannels`` are kept already, or the profile's
    ///   codec cannot encode the message (a content over ``Limits/maximumPayloadLength``);
    ///   ``TetherError/Code/storeFailed`` when the cluster's engine could not store it, and
    ///   then no subscriber gets it.
    @discardableResult
    public func publish(_ content: [UInt8], to channel: String, timeToLive: Duration? = nil) async throws(TetherError) -> UInt64 {
        guard let channelHub else {
            throw TetherError(code: .invalidArgument, message: "this server has no channels: set ServerConfiguration.channels")
        }
        return try await channelHub.publish(content, to: channel, timeToLive: timeToLive)
    }

    /// Publishes a JSON value to `channel`, as ``publish(_:to:timeToLive:)`` publishes bytes.
    ///
    /// - Parameters:
    ///   - json: The message.
    ///   - channel: The channel's name.
    ///   - timeToLive: How long the message may be delivered; `nil` for as long as the
    ///     history keeps it.
    /// - Returns: The message's offset in the channel.
    /// - Throws: What ``publish(_:to:timeToLive:)`` throws.
    @discardableResult
    public func publish(json: JSONValue, to channel: String, timeToLive: Duration? = nil) async throws(TetherError) -> UInt64 {
        try await publish(json.encoded, to: channel, timeToLive: timeToLive)
    }

    /// Who is subscribed to `channel` now: how many, and the first
    /// ``ChannelConfiguration/maximumPresenceMembers`` of them with their client ids and the
    /// info they gave (``Connection/subscribe(to:from:info:presenceEvents:)``).
    ///
    /// On a node of a cluster whose engine has channels, the members are those of every
    /// live node, as the engine last heard of them.
    ///
    /// - Parameter channel: The channel's name.
    /// - Returns: The channel's presence; no one for a channel that does not exist, or on a
    ///   server without channels.
    /// - Throws: ``TetherError/Code/storeFailed`` when the cluster's engine cannot be read.
    public func presence(of channel: String) async throws(TetherError) -> ChannelPresence {
        guard let channelHub else { return ChannelPresence(channel: channel, count: 0, members: []) }
        return ChannelPresence(try await channelHub.presence(of: channel))
    }
}
