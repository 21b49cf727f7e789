/// Calls `body` isolated to `target`, from a callback the event loop makes on the thread
/// that runs `target`'s executor (a read, a timer, a writable socket).
///
/// The standard library's `assumeIsolated` allocates two closure contexts on every call,
/// which on the path of every response was a third of a connection's heap allocations.
/// Here `body` is a static function with no captures, so the call allocates nothing. The
/// loop thread is checked in debug builds; every caller is a loop callback, and the loop
/// runs only its own actors' callbacks.
@inline(__always)
package func onLoop<Target: Actor, Argument>(
    _ loop: EventLoop,
    _ target: Target,
    _ argument: Argument,
    _ body: @escaping (isolated Target, Argument) -> Void
) {
    assert(loop.inLoop, "an isolated callback must run on its event loop \(loop.name)")
    typealias Plain = (Target, Argument) -> Void
    unsafeBitCast(body, to: Plain.self)(target, argument)
}

/// ``onLoop(_:_:_:_:)`` for a body that returns a value: from code that runs on the loop's
/// thread in a job of its own (a task on the loop, a loop callback), so that no actor of the
/// loop is running meanwhile.
@inline(__always)
func callOnLoop<Target: Actor, Argument, Result>(
    _ loop: EventLoop,
    _ target: Target,
    _ argument: Argument,
    _ body: @escaping (isolated Target, Argument) -> Result
) -> Result {
    assert(loop.inLoop, "an isolated callback must run on its event loop \(loop.name)")
    typealias Plain = (Target, Argument) -> Result
    return unsafeBitCast(body, to: Plain.self)(target, argument)
}
