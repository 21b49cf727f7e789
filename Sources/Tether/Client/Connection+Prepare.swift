// The app's preparation of each new connection (ConnectionConfiguration.prepare): it runs
// once the connection is up and before it is ready, and its requests go before anything
// that waits.

extension Connection {
    /// Set in the task that runs a connection's preparation: requests and frames that task
    /// sends on that connection go at once, ahead of everything that waits for it to be
    /// ready.
    @TaskLocal static var preparing: ObjectIdentifier?

    /// Whether the calling task is the preparation of this connection.
    nonisolated var callerPrepares: Bool {
        Self.preparing == ObjectIdentifier(self)
    }

    /// Runs the preparation of the connection of `token`, bounded by
    /// ``ConnectionConfiguration/prepareTimeout``, and reports how it ended.
    func startPreparation(_ token: ConnectionStateMachine.Token) {
        guard let prepare = configuration.prepare else {
            handle(.prepared(token))
            return
        }
        let timeout = configuration.prepareTimeout
        let server = remoteAddress?.description ?? currentEndpoint.description
        let identity = ObjectIdentifier(self)
        attemptHandles.preparationTask = Task { [weak self] in
            guard let self else { return }
            let outcome: TetherError?
            do {
                try await Self.$preparing.withValue(identity) { try await prepare(self) }
                outcome = nil
            } catch {
                outcome = TetherError(
                    code: (error as? TetherError)?.code ?? .connectFailed,
                    message: "the preparation of the connection to \(server) failed: \(TetherError.reason(of: error))",
                    underlying: error as? TetherError
                )
            }
            await self.preparationEnded(token, outcome)
        }
        attemptHandles.preparationTimer = loop.schedule(after: timeout) { [self] in
            assumeIsolated { connection in
                connection.attemptHandles.preparationTimer = nil
                connection.preparationEnded(token, TetherError(
                    code: .timedOut,
                    message: "the preparation of the connection to \(server) did not finish within \(describe(timeout))"
                ))
            }
        }
    }

    /// The preparation of `token` returned (`nil`) or failed.
    private func preparationEnded(_ token: ConnectionStateMachine.Token, _ failure: TetherError?) {
        stopPreparation()
        if let failure {
            handle(.preparationFailed(token, failure))
        } else {
            handle(.prepared(token))
        }
    }

    /// Cancels the preparation under way and its timer: the channel is going, or the
    /// preparation ended.
    func stopPreparation() {
        attemptHandles.preparationTask?.cancel()
        attemptHandles.preparationTask = nil
        if let timer = attemptHandles.preparationTimer { loop.cancel(timer) }
        attemptHandles.preparationTimer = nil
    }
}
