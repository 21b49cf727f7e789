// How a peer ends its connection for a reason of the server's own: the client is told the
// reason (``CloseNotice``) when its profile and the channel have room for it.

extension Peer {
    /// Ends the connection for `reason`, a reason of the server's own (a timeout, a limit,
    /// a protocol error, a takeover, a drain's deadline), writing the ``CloseNotice`` first
    /// and flushing it when the client can be told; closes at once otherwise.
    ///
    /// - Parameter reason: Why the server closes; its code and message go to the client.
    func close(for reason: TetherError) {
        guard lifecycle.isOpen, let channel, channel.canWriteCloseNotice(in: configuration.profile) else {
            end(reason, graceful: false)
            return
        }
        do {
            try write(CloseNotice(reason).frame, on: channel)
        } catch {
            // No room in the outbound buffer: the client is not reading anyway.
            end(reason, graceful: false)
            return
        }
        end(reason, graceful: true)
    }
}
