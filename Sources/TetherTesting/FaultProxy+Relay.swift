#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Tether

extension FaultProxy {
    // MARK: One connection's thread

    /// What one read or write asks of the connection.
    private enum Outcome {
        case carryOn
        case breakOff(Break)
    }

    /// The connection thread's own state: both sockets and both lanes. Only this thread
    /// touches the descriptors, and it closes them itself.
    final class Relay {
        let proxy: FaultProxy
        let link: Link
        /// The client's socket and the one to the server, owned by this thread.
        let clientSocket: Descriptor
        var serverSocket: Descriptor?
        let wakeEnd: Descriptor
        var client: Int32 { clientSocket.raw }
        var server: Int32 { serverSocket?.raw ?? -1 }
        var wake: Int32 { wakeEnd.raw }
        var up = Lane(.upstream)
        var down = Lane(.downstream)
        var readBuffer = [UInt8](repeating: 0, count: FaultProxy.laneLimit)

        init(proxy: FaultProxy, link: Link, client: Descriptor, wake: Descriptor) {
            self.proxy = proxy
            self.link = link
            self.clientSocket = client
            self.wakeEnd = wake
        }

        /// Connects upstream, forwards until the connection ends or breaks, and closes both
        /// sockets.
        func run(upstreamPort: Int) {
            guard connectUpstream(port: upstreamPort) else {
                proxy.count { $0.upstreamFailed += 1 }
                resetAndClose(clientSocket)
                serverSocket?.close()
                return
            }
            proxy.count { $0.upstreamConnected += 1 }
            let kind = relay()
            if let kind { breakOff(kind) } else { closeBoth() }
        }

        /// Connects to 127.0.0.1:`port` without blocking past a break request or 5 s.
        private func connectUpstream(port: Int) -> Bool {
            guard let fd = try? Syscall.makeSocket(family: AF_INET, type: SocketOptions.streamType) else { return false }
            serverSocket = Descriptor(adopting: fd)
            setNoDelay(fd)
            limitReceiveBuffer(fd)
            guard let connected = try? Syscall.startConnect(fd, TetherSocketAddress(ipAddress: "127.0.0.1", port: port)!) else { return false }
            if connected { return true }
            let deadline = ContinuousClock.now + .seconds(5)
            var descriptors = [
                pollfd(fd: fd, events: Int16(POLLOUT), revents: 0),
                pollfd(fd: wake, events: Int16(POLLIN), revents: 0),
            ]
            while ContinuousClock.now < deadline {
                _ = pollDescriptors(&descriptors, milliseconds: 100)
                WakePipe.drain(wake)
                if link.control.withLock({ $0.breakRequest }) != nil { return false }
                if descriptors[0].revents != 0 {
                    return (try? Syscall.getOption(fd, level: SocketOptions.socketLevel, name: SocketOptions.error)) == 0
                }
            }
            return false
        }

        /// Forwards until both directions have ended (nil) or the connection must break.
        private func relay() -> Break? {
            while true {
                WakePipe.drain(wake)
                let (mode, request, toServer, toClient) = link.control.withLock { control in
                    defer {
                        control.injectUpstream = []
                        control.injectDownstream = []
                    }
                    return (control.mode, control.breakRequest, control.injectUpstream, control.injectDownstream)
                }
                if let request { return request }
                if let cut = mode.cut, link.control.withLock({ $0.cutRemaining }) == 0 { return cut.reset ? .reset : .close }
                up.inject(toServer)
                down.inject(toClient)

                if case .breakOff(let kind) = write(&down, to: client, mode: mode) { return kind }
                if case .breakOff(let kind) = write(&up, to: server, mode: mode) { return kind }
                if up.finished, down.finished { return nil }

                let now = ContinuousClock.now
                var descriptors = [
                    pollfd(fd: wake, events: Int16(POLLIN), revents: 0),
                    pollfd(fd: client, events: events(reading: up, writing: down, mode: mode, now: now), revents: 0),
                    pollfd(fd: server, events: events(reading: down, writing: up, mode: mode, now: now), revents: 0),
                ]
                for index in 1...2 where descriptors[index].events == 0 { descriptors[index].fd = -1 }
                // Wake when a held lane's delay or flush delay ends; a lane already due waits for POLLOUT.
                var timeout: Int32 = 250
                for lane in [up, down] where !lane.mayForward(mode, now: now) {
                    if let deadline = lane.deadline(mode, now: now) { timeout = min(timeout, milliseconds(until: deadline, from: now)) }
                }
                if !pollDescriptors(&descriptors, milliseconds: timeout) { return .reset }

                if descriptors[1].revents != 0, descriptors[1].events & Int16(POLLIN) != 0 {
                    if case .breakOff(let kind) = read(from: client, into: &up, mode: mode) { return kind }
                }
                if descriptors[2].revents != 0, descriptors[2].events & Int16(POLLIN) != 0 {
                    if case .breakOff(let kind) = read(from: server, into: &down, mode: mode) { return kind }
                }
            }
        }

        /// What to wait for on the socket that `source` reads from and `destination` writes to.
        private func events(reading source: Lane, writing destination: Lane, mode: Mode, now: ContinuousClock.Instant) -> Int16 {
            var events: Int16 = 0
            if source.wantsInput(mode) { events |= Int16(POLLIN) }
            if destination.injectedQueued > 0 || destination.mayForward(mode, now: now) { events |= Int16(POLLOUT) }
            return events
        }

        /// Reads what the socket has into the lane, as much as the lane has room for.
        private func read(from fd: Int32, into lane: inout Lane, mode: Mode) -> Outcome {
            let room = max(0, FaultProxy.laneLimit(mode, lane.direction) - lane.queued)
            let result = readBuffer.withUnsafeMutableBytes { receive(fd, into: $0, count: room) }
            switch result {
            case .wouldBlock:
                return .carryOn
            case .failed:
                return .breakOff(.reset)
            case .done(0):
                lane.sourceEnded = true
                return .carryOn
            case .done(let count):
                lane.append(readBuffer[0..<count], at: ContinuousClock.now)
                return .carryOn
            }
        }

        /// Writes what may go out now: injected bytes first, then forwarded ones shaped by the
        /// mode and limited by the cut; passes on the FIN once the source ended and all is out.
        private func write(_ lane: inout Lane, to fd: Int32, mode: Mode) -> Outcome {
            while lane.injectedQueued > 0 {
                let result = lane.withInjected { sendSome(fd, $0) }
                switch result {
                case .wouldBlock: return .carryOn
                case .failed: return .breakOff(.reset)
                case .done(let count):
                    lane.consumeInjected(count)
                    proxy.count { $0.bytesInjected += count }
                }
            }
            while lane.mayForward(mode, now: ContinuousClock.now) {
                var size = lane.ready(mode, now: ContinuousClock.now)
                if case .pieces(let maximum) = mode.shaping(lane.direction) { size = min(size, maximum) }
                size = min(size, lane.allowance(mode, now: ContinuousClock.now))
                let (allowance, epoch) = link.control.withLock { control -> (Int?, Int) in
                    guard let cut = control.mode.cut, cut.counts(lane.direction) else { return (nil, control.cutEpoch) }
                    return (control.cutRemaining, control.cutEpoch)
                }
                if let allowance { size = min(size, allowance) }
                guard size > 0 else { return .carryOn }
                let result = lane.withPending(size) { sendSome(fd, $0) }
                switch result {
                case .wouldBlock:
                    return .carryOn
                case .failed:
                    return .breakOff(.reset)
                case .done(let count):
                    if case .coalesce = mode.shaping(lane.direction) { lane.flushing = true }
                    lane.spend(count, mode, now: ContinuousClock.now)
                    lane.consume(count)
                    let direction = lane.direction
                    proxy.count { counters in
                        if direction == .upstream {
                            counters.bytesUpstream += count
                            counters.writesUpstream += 1
                        } else {
                            counters.bytesDownstream += count
                            counters.writesDownstream += 1
                        }
                    }
                    guard allowance != nil else { continue }
                    let cut = link.control.withLock { control -> Cut? in
                        guard control.cutEpoch == epoch, let remaining = control.cutRemaining else { return nil }
                        control.cutRemaining = max(0, remaining - count)
                        return control.cutRemaining == 0 ? control.mode.cut : nil
                    }
                    if let cut { return .breakOff(cut.reset ? .reset : .close) }
                }
            }
            if lane.sourceEnded, lane.queued == 0, lane.injectedQueued == 0, !lane.finished {
                shutdownSending(fd)
                lane.finished = true
            }
            return .carryOn
        }

        /// Closes both sockets at once: after discarding what is waiting to be read (so the
        /// close is a FIN, not an RST), or with `SO_LINGER` 0 (an RST).
        private func breakOff(_ kind: Break) {
            for socket in [clientSocket, serverSocket].compactMap({ $0 }) {
                if kind == .reset {
                    resetAndClose(socket)
                } else {
                    discardInput(socket.raw)
                    socket.close()
                }
            }
        }

        /// Closes both sockets after both directions ended normally.
        private func closeBoth() {
            clientSocket.close()
            serverSocket?.close()
        }

        /// The time from `now` to `deadline` for `poll(2)`, rounded up.
        private func milliseconds(until deadline: ContinuousClock.Instant, from now: ContinuousClock.Instant) -> Int32 {
            guard deadline > now else { return 0 }
            let (seconds, attoseconds) = (deadline - now).components
            return Int32(clamping: seconds * 1000 + attoseconds / 1_000_000_000_000_000 + 1)
        }
    }
}
