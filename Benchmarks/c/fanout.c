/* Measures push fan-out (scenario f): how many notifications per second a server delivers
 * to C connected clients. Connection 0 asks for broadcasts with a request of type 0x403
 * whose payload is `rounds: UInt32 | size: UInt32` (big-endian); the server pushes `rounds`
 * notifications of type 0x2 with `size` bytes each to every connection, then answers the
 * 0x403. The next request goes out once that answer and every notification of the batch
 * have arrived, so the loop is closed: nothing queues up without bound.
 *
 *   fanout --port P [--connections C] [--rounds R] [--size BYTES] [--duration S] [--warmup S]
 *
 * Prints: RESULT impl=c-fanout conns=… rounds=… size=… notifications=… seconds=… nps=… errors=… */
#include "common.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

struct connection {
    int fd;
    uint8_t header[HEADER_LENGTH];
    size_t header_have, skipping;
    uint32_t type;
};

static uint64_t received_total, received_in_window, errors;
static int answered;

static void on_frame(struct connection *c, uint64_t now, uint64_t start, uint64_t end) {
    if (c->type == 0x2) {
        received_total++;
        if (now >= start && now < end) received_in_window++;
    } else if (c->type == 0x403) {
        answered = 1;
    } else if (c->type != 0x1) {
        errors++;
    }
}

int main(int argc, char **argv) {
    int port = 0, connections = 1000, rounds = 10, size = 64;
    double duration = 5, warmup = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *name = argv[i], *value = argv[i + 1];
        if (!strcmp(name, "--port")) port = atoi(value);
        else if (!strcmp(name, "--connections")) connections = atoi(value);
        else if (!strcmp(name, "--rounds")) rounds = atoi(value);
        else if (!strcmp(name, "--size")) size = atoi(value);
        else if (!strcmp(name, "--duration")) duration = atof(value);
        else if (!strcmp(name, "--warmup")) warmup = atof(value);
        else { fprintf(stderr, "fanout: unknown option %s\n", name); return 2; }
    }
    if (port <= 0 || connections < 1 || rounds < 1 || size < 0) { fprintf(stderr, "fanout: bad arguments\n"); return 2; }

    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int epoll = epoll_create1(EPOLL_CLOEXEC), one = 1;
    struct connection *all = calloc((size_t)connections, sizeof *all);
    for (int i = 0; i < connections; i++) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) die("socket");
        if (connect(fd, (struct sockaddr *)&address, sizeof address) < 0) die("connect");
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        all[i].fd = fd;
    }
    /* One echo per connection first, so the server has attached every one before pushing. */
    uint8_t probe[HEADER_LENGTH];
    put_u32(probe, 0x402);
    put_u32(probe + 8, 0);
    for (int i = 0; i < connections; i++) {
        put_u32(probe + 4, (uint32_t)i + 1);
        if (write(all[i].fd, probe, sizeof probe) != (ssize_t)sizeof probe) die("write");
    }
    for (int i = 0; i < connections; i++) {
        uint8_t reply[HEADER_LENGTH];
        size_t have = 0;
        while (have < sizeof reply) {
            ssize_t n = read(all[i].fd, reply + have, sizeof reply - have);
            if (n <= 0) { fprintf(stderr, "fanout: connection %d got no echo\n", i); return 1; }
            have += (size_t)n;
        }
        fcntl(all[i].fd, F_SETFL, fcntl(all[i].fd, F_GETFL) | O_NONBLOCK);
        struct epoll_event event = {.events = EPOLLIN, .data.ptr = &all[i]};
        if (epoll_ctl(epoll, EPOLL_CTL_ADD, all[i].fd, &event) < 0) die("epoll_ctl");
    }

    uint64_t start = now_ns() + (uint64_t)(warmup * 1e9), end = start + (uint64_t)(duration * 1e9);
    uint64_t batches = 0, per_batch = (uint64_t)rounds * (uint64_t)connections;
    uint8_t trigger[HEADER_LENGTH + 8];
    put_u32(trigger, 0x403);
    put_u32(trigger + 8, 8);
    put_u32(trigger + HEADER_LENGTH, (uint32_t)rounds);
    put_u32(trigger + HEADER_LENGTH + 4, (uint32_t)size);
    uint8_t *scratch = malloc(256 * 1024);
    struct epoll_event events[256];
    answered = 1;
    for (;;) {
        uint64_t now = now_ns();
        if (answered && received_total >= batches * per_batch) {
            if (now >= end) break;
            put_u32(trigger + 4, (uint32_t)batches + 1);
            if (write(all[0].fd, trigger, sizeof trigger) != (ssize_t)sizeof trigger) die("write");
            batches++;
            answered = 0;
        }
        if (now > end + 10000000000ull) {
            fprintf(stderr, "fanout: stalled: %llu of %llu notifications of the last batch arrived\n",
                    (unsigned long long)(received_total - (batches - 1) * per_batch), (unsigned long long)per_batch);
            return 3;
        }
        int count = epoll_wait(epoll, events, 256, 100);
        if (count < 0 && errno != EINTR) die("epoll_wait");
        for (int e = 0; e < count; e++) {
            struct connection *c = events[e].data.ptr;
            ssize_t n = read(c->fd, scratch, 256 * 1024);
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
                fprintf(stderr, "fanout: a connection closed\n");
                return 1;
            }
            if (n < 0) continue;
            uint64_t stamp = now_ns();
            const uint8_t *p = scratch, *last = scratch + n;
            while (p < last) {
                if (c->skipping > 0) {
                    size_t take = (size_t)(last - p) < c->skipping ? (size_t)(last - p) : c->skipping;
                    p += take;
                    c->skipping -= take;
                    if (c->skipping == 0) on_frame(c, stamp, start, end);
                    continue;
                }
                size_t take = HEADER_LENGTH - c->header_have;
                if ((size_t)(last - p) < take) take = (size_t)(last - p);
                memcpy(c->header + c->header_have, p, take);
                p += take;
                c->header_have += take;
                if (c->header_have < HEADER_LENGTH) break;
                c->header_have = 0;
                c->type = get_u32(c->header);
                uint32_t length = get_u32(c->header + 8);
                if (length > MAXIMUM_PAYLOAD) { fprintf(stderr, "fanout: bad frame\n"); return 1; }
                c->skipping = length;
                if (length == 0) on_frame(c, stamp, start, end);
            }
        }
    }
    double seconds = (double)(end - start) / 1e9;
    printf("RESULT impl=c-fanout conns=%d rounds=%d size=%d notifications=%llu seconds=%.3f nps=%.0f errors=%llu\n",
           connections, rounds, size, (unsigned long long)received_in_window, seconds,
           (double)received_in_window / seconds, (unsigned long long)errors);
    fflush(stdout);
    return errors ? 1 : 0;
}
