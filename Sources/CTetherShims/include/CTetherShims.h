#ifndef C_TETHER_SHIMS_H
#define C_TETHER_SHIMS_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

// Platform headers the Swift standard C modules do not expose, in one place.
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#if defined(__linux__)
#include <sys/epoll.h>
#include <sys/eventfd.h>
#else
#include <sys/event.h>
#include <sys/time.h>
#endif

#if defined(__linux__)
/// `accept4(2)` returning a nonblocking, close-on-exec descriptor.
static inline int ctether_accept4(int fd) { return accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC); }
#endif

/// Number of the calling thread's `errno`, read through a function so Swift never caches it.
static inline int ctether_errno(void) { return errno; }

#endif
