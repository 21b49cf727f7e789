#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Tether

extension FaultProxy {
    // MARK: Accepting

    /// The acceptor thread: accepts until the proxy stops, then closes the listener and
    /// both ends of its wake pipe.
    func acceptLoop(listener: Descriptor, wake: Descriptor) {
        var descriptors = [
            pollfd(fd: listener.raw, events: Int16(POLLIN), revents: 0),
            pollfd(fd: wake.raw, events: Int16(POLLIN), revents: 0),
        ]
        while !state.withLock({ $0.stopping }) {
            _ = pollDescriptors(&descriptors, milliseconds: 250)
            WakePipe.drain(wake.raw)
            guard descriptors[0].revents != 0 else { continue }
            while case .processed(let client)? = try? Syscall.acceptConnection(listener.raw) {
                admit(Descriptor(adopting: client))
            }
        }
        listener.close()
        threadExited { state in
            state.acceptorWake?.close()
            state.acceptorWake = nil
        }
        wake.close()
    }

    /// Registers an accepted client and starts its connection thread, unless the proxy is stopping.
    private func admit(_ client: Descriptor) {
        if state.withLock({ $0.refusing }) {
            resetAndClose(client)
            count { $0.refused += 1 }
            return
        }
        setNoDelay(client.raw)
        guard let wake = try? WakePipe() else {
            resetAndClose(client)
            return
        }
        let (link, ready) = state.withLock { state -> (Link?, [Waiter]) in
            guard !state.stopping else { return (nil, []) }
            state.nextLinkID += 1
            let link = Link(id: state.nextLinkID, mode: state.defaultMode, wake: wake.writeEnd)
            state.links[link.id] = link
            state.liveThreads += 1
            state.counters.accepted += 1
            return (link, state.takeSatisfiedWaiters())
        }
        for waiter in ready { waiter.continuation.resume() }
        guard let link else {
            resetAndClose(client)
            wake.close()
            return
        }
        let upstreamPort = upstreamPort
        BlockingThread.run { [self] in
            let relay = Relay(proxy: self, link: link, client: client, wake: wake.readEnd)
            relay.run(upstreamPort: upstreamPort)
            link.closeWake()
            wake.readEnd.close()
            threadExited { state in
                state.links.removeValue(forKey: link.id)
                state.counters.closed += 1
            }
        }
    }

    /// How a connection is broken off: both sockets closed (FIN) or reset (RST).
    enum Break: Sendable {
        case close, reset
    }

    // MARK: One connection's shared part

    /// What other threads may ask of one connection, under its lock.
    final class Link: Sendable {
        struct Control {
            var mode: Mode
            /// Bytes the cut still allows, or nil without a cut.
            var cutRemaining: Int?
            /// Changes whenever the cut restarts, so a count taken before does not apply.
            var cutEpoch = 0
            var breakRequest: Break?
            var injectUpstream: [UInt8] = []
            var injectDownstream: [UInt8] = []
            /// Write end of the connection thread's wake pipe; `nil` once it closed it.
            var wake: Descriptor?
        }

        let id: Int
        let control: Lock<Control>

        init(id: Int, mode: Mode, wake: Descriptor) {
            self.id = id
            control = Lock(Control(mode: mode, cutRemaining: mode.cut?.afterBytes, wake: wake))
        }

        func update(_ change: (inout Mode) -> Void) {
            control.withLock { control in
                var mode = control.mode
                change(&mode)
                if mode.cut != control.mode.cut {
                    control.cutRemaining = mode.cut?.afterBytes
                    control.cutEpoch += 1
                }
                control.mode = mode
                poke(control)
            }
        }

        func requestBreak(_ kind: Break) {
            control.withLock { control in
                if control.breakRequest != .reset { control.breakRequest = kind }
                poke(control)
            }
        }

        func inject(_ bytes: [UInt8], toward direction: Direction) -> Bool {
            control.withLock { control in
                guard control.wake != nil else { return false }
                if direction == .upstream { control.injectUpstream += bytes } else { control.injectDownstream += bytes }
                poke(control)
                return true
            }
        }

        /// Called by the connection thread as it exits: nobody may write to the pipe after this.
        func closeWake() {
            control.withLock { control in
                control.wake?.close()
                control.wake = nil
            }
        }

        private func poke(_ control: Control) {
            if let wake = control.wake { WakePipe.poke(wake.raw) }
        }
    }

}
