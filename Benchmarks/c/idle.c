/* Holds idle connections to a seed echo server, for measuring the server's memory per
 * connection (scenario e). Opens C connections to 127.0.0.1:P, does one 64-byte request
 * round trip on each (so the server has accepted and served every one), prints
 * "ready C", then holds them until it is killed.
 *
 *   idle --port P --connections C
 */
#include "common.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

static int read_exactly(int fd, uint8_t *bytes, size_t count) {
    size_t offset = 0;
    while (offset < count) {
        ssize_t n = read(fd, bytes + offset, count - offset);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        offset += (size_t)n;
    }
    return 0;
}

int main(int argc, char **argv) {
    int port = 0, connections = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--port")) port = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--connections")) connections = atoi(argv[i + 1]);
        else { fprintf(stderr, "usage: %s --port P --connections C\n", argv[0]); return 2; }
    }
    if (port <= 0 || connections < 1) { fprintf(stderr, "usage: %s --port P --connections C\n", argv[0]); return 2; }
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int *fds = calloc((size_t)connections, sizeof(int));
    uint8_t frame[HEADER_LENGTH + 64], reply[HEADER_LENGTH + 64];
    memset(frame, 0x61, sizeof frame);
    put_u32(frame, 0x402);
    put_u32(frame + 8, 64);
    int one = 1;
    for (int i = 0; i < connections; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fds[i] < 0) die("socket");
        if (connect(fds[i], (struct sockaddr *)&address, sizeof address) < 0) die("connect");
        setsockopt(fds[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        put_u32(frame + 4, (uint32_t)i + 1);
        if (write(fds[i], frame, sizeof frame) != (ssize_t)sizeof frame) die("write");
    }
    for (int i = 0; i < connections; i++) {
        if (read_exactly(fds[i], reply, sizeof reply) < 0 || get_u32(reply + 4) != (uint32_t)i + 1) {
            fprintf(stderr, "idle: connection %d got no echo\n", i);
            return 1;
        }
    }
    printf("ready %d\n", connections);
    fflush(stdout);
    for (;;) pause();
}
