// Calls into the standard library that are newer than the oldest Apple systems the package
// supports (macOS 15, iOS 18), each with what runs instead there. Linux has the toolchain's
// own runtime, so it always takes the newer path.

extension DiscardingTaskGroup {
    /// Adds a child task that starts at once on the caller's executor, up to its first
    /// suspension, when the runtime can (`addImmediateTask`, macOS 26 and iOS 26, and Linux);
    /// otherwise an ordinary child task, which starts as soon as its executor runs it.
    ///
    /// - Parameters:
    ///   - executor: The task executor the child prefers; `nil` keeps the caller's.
    ///   - operation: The child's work; isolated like the caller.
    mutating func addTaskStartingNow(
        executorPreference executor: (any TaskExecutor)? = nil,
        @_inheritActorContext @_implicitSelfCapture operation: sending @escaping @isolated(any) () async -> Void
    ) {
        if #available(macOS 26, iOS 26, tvOS 26, watchOS 26, visionOS 26, *) {
            addImmediateTask(executorPreference: executor, operation: operation)
        } else {
            addTask(executorPreference: executor, operation: operation)
        }
    }
}
