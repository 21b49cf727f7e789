#if canImport(Glibc)
@preconcurrency import Glibc
#elseif canImport(Musl)
@preconcurrency import Musl
#elseif canImport(Darwin)
@preconcurrency import Darwin
#endif

/// What identifies a file on this machine, and whether it is a socket.
package struct FileIdentity: Equatable, Sendable {
    package var device: UInt64
    package var inode: UInt64
    package var isSocket: Bool
}

extension Syscall {
    /// `lstat(2)`: the file at `path`, not following a symbolic link; `nil` when there is
    /// none.
    package static func fileIdentity(_ path: String) throws(Errno) -> FileIdentity? {
        var status = stat()
        if lstat(path, &status) != 0 {
            let error = Errno.current
            if error.rawValue == ENOENT { return nil }
            throw error
        }
        return FileIdentity(device: UInt64(status.st_dev), inode: UInt64(status.st_ino), isSocket: (status.st_mode & S_IFMT) == S_IFSOCK)
    }

    /// `chmod(2)`.
    package static func changeMode(_ path: String, _ mode: Int) throws(Errno) {
        if chmod(path, mode_t(mode)) != 0 { throw Errno.current }
    }

    /// `unlink(2)`; a file already gone is not an error.
    package static func removeFile(_ path: String) throws(Errno) {
        if unlink(path) != 0, Errno.current.rawValue != ENOENT { throw Errno.current }
    }
}
