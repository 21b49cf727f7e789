#define _GNU_SOURCE
#include <errno.h>
#include <stddef.h>
#include <sys/socket.h>
#include "CTetherShims.h"

#if defined(__linux__)
int ctether_accept4(int fd) {
    return accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
}
#endif

int ctether_errno(void) {
    return errno;
}
