// Sends that return once the frame is written: its last byte handed to the kernel (or, over
// TLS, to the encryption), within a timeout.

/// When ``Connection/send(_:completion:)`` returns.
public enum SendCompletion: Sendable, Hashable {
    /// Once the frame is queued on the connection, as ``Connection/send(_:)`` does.
    case queued
    /// Once the frame's last byte has been handed to the kernel: written to the socket, or
    /// over TLS encrypted and handed on, or over WebSocket framed and handed on. `timeout`
    /// bounds the whole wait, in the queue included; `nil` waits as long as the connection
    /// lasts.
    case written(timeout: Duration?)
}

extension Connection {
    /// A ``send(_:completion:)`` waiting for its frame to be written.
    struct TrackedSend {
        var continuation: UnsafeContinuation<Void, any Error>
        var timer: LoopTimer?
        let type: UInt32
        let serial: UInt32
        let size: Int
        let timeout: Duration?
        /// The channel the frame was written to; `nil` while it waits in the queue.
        var channel: Channel?
    }

    /// Sends a frame, and returns when it is queued or when it is written, as `completion`
    /// says.
    ///
    /// With ``SendCompletion/written(timeout:)``, the call returns once the frame's last
    /// byte has left the process for the kernel: the peer may not have read it yet, but
    /// nothing of it waits in Tether's buffers any more. It waits behind a full outbound
    /// buffer (a peer that reads slowly) and for a connection, like ``send(_:)``, and ends
    /// exactly once:
    ///
    /// - the timeout passes while the frame waits in the queue: ``TetherError/Code/timedOut``,
    ///   and the frame is taken out of the queue and never sent;
    /// - the timeout passes while its bytes wait in the connection's buffers:
    ///   ``TetherError/Code/timedOut``, and the frame stays where it is, to be written when
    ///   the peer reads (the error says how many bytes were waiting);
    /// - the connection ends first: ``TetherError/Code/connectionLost``
    ///   (``TetherError/Code/connectionClosed`` after ``close()``): the frame may be lost;
    /// - the task is cancelled: `CancellationError`, with the frame taken out of the queue
    ///   if it was still there.
    ///
    /// ```swift
    /// let photo = Frame(type: 0x30, serial: 0, payload: bytes)
    /// try await connection.send(photo, completion: .written(timeout: .seconds(30)))
    /// ```
    ///
    /// - Parameters:
    ///   - frame: The frame, sent as is (its serial too).
    ///   - completion: When to return.
    /// - Throws: What ``send(_:)`` throws, and, for a written send, the errors above.
    public func send(_ frame: Frame, completion: SendCompletion) async throws {
        guard case .written(let timeout) = completion else {
            try await send(frame)
            return
        }
        try Task.checkCancellation()
        nextSendID += 1
        let id = nextSendID
        try await withTaskCancellationHandler {
            try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<Void, any Error>) in
                if lifecycle.hasEnded {
                    continuation.resume(throwing: notConnected())
                    return
                }
                if Task.isCancelled {
                    continuation.resume(throwing: CancellationError())
                    return
                }
                var tracked = TrackedSend(continuation: continuation, type: frame.type, serial: frame.serial, size: frame.payload.count, timeout: timeout)
                if let timeout {
                    tracked.timer = loop.schedule(after: timeout) { [self] in
                        assumeIsolated { $0.trackedSendTimedOut(id) }
                    }
                }
                trackedSends[id] = tracked
                if let channel = channelForSendNow() {
                    do {
                        try writeSent(frame, on: channel)
                        trackWritten(id, on: channel)
                    } catch {
                        finishTrackedSend(id, error)
                    }
                } else if let refusal = queueRefusal() {
                    finishTrackedSend(id, refusal)
                } else {
                    sendQueue.append(QueuedSend(id: id, frame: frame, waiter: nil))
                    pump()
                }
            }
        } onCancel: {
            loop.execute { [self] in
                assumeIsolated { $0.trackedSendCancelled(id) }
            }
        }
    }

    /// The frame of send `id` went into `channel`: wait for its bytes to leave.
    func trackWritten(_ id: UInt64, on channel: Channel) {
        guard trackedSends[id] != nil else { return }
        trackedSends[id]?.channel = channel
        let loop = loop
        channel.whenWritten(id: id) { [weak self] written in
            guard let self else { return }
            // Outside the flush (or the close) that decided it.
            loop.execute { [self] in
                assumeIsolated { $0.trackedWriteEnded(id, written: written) }
            }
        }
    }

    private func trackedWriteEnded(_ id: UInt64, written: Bool) {
        guard let tracked = trackedSends[id] else { return }
        if written {
            finishTrackedSend(id, nil)
            return
        }
        let closed = state.isFinal && state.reason?.code == .connectionClosed
        finishTrackedSend(id, TetherError(
            code: closed ? .connectionClosed : .connectionLost,
            message: "the connection to \(remoteAddress?.description ?? currentEndpoint.description) ended before frame \(hex(tracked.type)) serial \(tracked.serial) was written; it may not have reached the peer"
        ))
    }

    private func trackedSendTimedOut(_ id: UInt64) {
        guard var tracked = trackedSends[id] else { return }
        tracked.timer = nil
        trackedSends[id] = tracked
        let limit = describe(tracked.timeout ?? .zero)
        let what = "frame \(hex(tracked.type)) serial \(tracked.serial) (\(counted(tracked.size, "byte")))"
        if let channel = tracked.channel {
            let pending = channel.pendingOutboundBytes
            channel.cancelWhenWritten(id: id)
            finishTrackedSend(id, TetherError(
                code: .timedOut,
                message: "\(what) was not written to \(channel.remoteAddress) within \(limit): \(counted(pending, "byte")) still \(pending == 1 ? "waits" : "wait") to be written, the peer is not reading them; it stays queued on this connection"
            ))
        } else {
            removeQueuedSend(id)
            finishTrackedSend(id, TetherError(
                code: .timedOut,
                message: "\(what) was not sent to \(currentEndpoint) within \(limit): it waited \(channel == nil ? "for a connection" : "behind a full outbound buffer"), and was taken out of the queue"
            ))
        }
    }

    private func trackedSendCancelled(_ id: UInt64) {
        guard let tracked = trackedSends[id] else { return }
        if let channel = tracked.channel {
            channel.cancelWhenWritten(id: id)
        } else {
            removeQueuedSend(id)
        }
        finishTrackedSend(id, CancellationError())
    }

    private func removeQueuedSend(_ id: UInt64) {
        guard let index = sendQueue.firstIndex(where: { $0.id == id }) else { return }
        sendQueue.remove(at: index)
        requestEnded()
    }

    /// Ends send `id` once: with success when `error` is `nil`.
    func finishTrackedSend(_ id: UInt64, _ error: (any Error)?) {
        guard let tracked = trackedSends.removeValue(forKey: id) else { return }
        if let timer = tracked.timer { loop.cancel(timer) }
        if let error {
            tracked.continuation.resume(throwing: error)
        } else {
            tracked.continuation.resume()
        }
    }
}
