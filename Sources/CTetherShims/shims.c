#define _GNU_SOURCE
#include <errno.h>
#include <stddef.h>
#include <sys/socket.h>
#include <string.h>
#include <unistd.h>
#include "CTetherShims.h"

#if defined(__linux__)
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#endif

#if defined(__linux__)
int ctether_accept4(int fd) {
    return accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
}

int ctether_netlink_open(unsigned int groups) {
    int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, NETLINK_ROUTE);
    if (fd < 0) return -1;
    struct sockaddr_nl address;
    memset(&address, 0, sizeof address);
    address.nl_family = AF_NETLINK;
    address.nl_groups = groups;
    if (bind(fd, (struct sockaddr *)&address, sizeof address) != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}
#endif

int ctether_errno(void) {
    return errno;
}

#if defined(__linux__)
#include <sys/ioctl.h>
#include <linux/sockios.h>
int ctether_unacknowledged_bytes(int fd) {
    int count = 0;
    if (ioctl(fd, SIOCOUTQ, &count) != 0) return -1;
    return count;
}
#elif defined(__APPLE__)
int ctether_unacknowledged_bytes(int fd) {
    int count = 0;
    socklen_t length = sizeof count;
    if (getsockopt(fd, SOL_SOCKET, SO_NWRITE, &count, &length) != 0) return -1;
    return count;
}
#else
int ctether_unacknowledged_bytes(int fd) {
    (void)fd;
    return 0;
}
#endif
