extension Connection {
    /// Goes back to the main endpoint when the primary retry of the connection over the
    /// fallback is due and nothing is in flight or queued; otherwise waits for the last
    /// request to end.
    func retryPrimaryIfIdle() {
        guard let token = reconnectHandles.primaryRetryWaiting, table.count == 0, sendQueue.isEmpty else { return }
        reconnectHandles.primaryRetryWaiting = nil
        handle(.primaryRetryDue(token))
    }

    /// A request ended: when a primary retry waits for none to be left, check on the next
    /// turn of the loop, after the step that ended it (which may still use the channel).
    func requestEnded() {
        guard reconnectHandles.primaryRetryWaiting != nil || lifecycle.isDeparting else { return }
        loop.execute { [self] in
            assumeIsolated { connection in
                connection.retryPrimaryIfIdle()
                connection.departIfIdle()
            }
        }
    }
}
