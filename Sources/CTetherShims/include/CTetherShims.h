#ifndef C_TETHER_SHIMS_H
#define C_TETHER_SHIMS_H

// Platform headers the Swift C library modules do not expose, kept to the minimum so they
// do not clash with the toolchain's own modules.
#if defined(__linux__)
#include <sys/epoll.h>
#include <sys/eventfd.h>

/// `accept4(2)` returning a nonblocking, close-on-exec descriptor.
int ctether_accept4(int fd);

/// A nonblocking, close-on-exec `NETLINK_ROUTE` socket bound to the multicast `groups`
/// (0 for none: a socket for requests); -1 with `errno` set on failure.
int ctether_netlink_open(unsigned int groups);
#endif

// The C library parts the bottom layer of the Tether module needs (`memset`, `memchr`,
// `pthread_mutex_*`), the same on every platform: files there import this module instead
// of choosing between Glibc, Musl and Darwin.
#include <pthread.h>
#include <string.h>

/// The calling thread's `errno`, read through a function so Swift never caches it.
int ctether_errno(void);

/// The bytes in a socket's send queue that the peer has not acknowledged yet: `TIOCOUTQ`
/// on Linux, `SO_NWRITE` on Darwin; -1 with `errno` set on failure.
int ctether_unacknowledged_bytes(int fd);

#endif
