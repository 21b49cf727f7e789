// What Selector+Kqueue.swift uses of the rest of the Tether module, declared as the module
// declares it, for type-checking that file alone.
import Glibc

struct Errno: Error, Equatable {
    var rawValue: Int32
    static var current: Errno { Errno(rawValue: errno) }
    static let interrupted = Errno(rawValue: EINTR)
}

enum Syscall {
    static func retrying<T: BinaryInteger>(_ body: () -> T) throws(Errno) -> T {
        while true {
            let result = body()
            if result >= 0 { return result }
            let error = Errno.current
            if error != .interrupted { throw error }
        }
    }

    static func closeDescriptor(_ fd: Int32) {
        _ = close(fd)
    }
}
