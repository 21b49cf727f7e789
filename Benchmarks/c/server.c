/* The C baseline echo server for the seed protocol: every frame (12-byte big-endian header
 * type | serial | length, then the payload) is answered with the same type, serial and
 * payload. One thread accepts; worker threads (one per core) each run a level-triggered
 * epoll loop: one read into a per-connection buffer, every complete frame answered, one
 * write per read.
 *
 *   server --port P [--threads N]      prints "listening on 127.0.0.1:PORT" when ready
 */
#include "common.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

struct connection {
    int fd;
    int writing; /* EPOLLOUT registered */
    struct buffer in, out;
};

struct worker {
    pthread_t thread;
    int epoll;
};

static void close_connection(int epoll, struct connection *c) {
    epoll_ctl(epoll, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    free(c->in.bytes);
    free(c->out.bytes);
    free(c);
}

static void set_writing(int epoll, struct connection *c, int writing) {
    if (c->writing == writing) return;
    struct epoll_event event = {.events = EPOLLIN | (writing ? EPOLLOUT : 0), .data.ptr = c};
    epoll_ctl(epoll, EPOLL_CTL_MOD, c->fd, &event);
    c->writing = writing;
}

/* Writes what is queued; returns -1 when the connection failed. */
static int flush_out(int epoll, struct connection *c) {
    while (c->out.start < c->out.end) {
        ssize_t n = write(c->fd, c->out.bytes + c->out.start, c->out.end - c->out.start);
        if (n > 0) { c->out.start += (size_t)n; continue; }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) { set_writing(epoll, c, 1); return 0; }
        return -1;
    }
    c->out.start = c->out.end = 0;
    set_writing(epoll, c, 0);
    return 0;
}

/* Queues the echo of `length` bytes of complete frames, writing straight from them when
 * nothing else waits; returns -1 when the connection failed. */
static int answer(int epoll, struct connection *c, const uint8_t *frames, size_t length) {
    if (length == 0) return 0;
    if (c->out.start == c->out.end) {
        while (length > 0) {
            ssize_t n = write(c->fd, frames, length);
            if (n > 0) { frames += n; length -= (size_t)n; continue; }
            if (n < 0 && errno == EINTR) continue;
            if (n < 0 && errno == EAGAIN) break;
            return -1;
        }
        if (length == 0) return 0;
    }
    buffer_reserve(&c->out, length);
    memcpy(c->out.bytes + c->out.end, frames, length);
    c->out.end += length;
    return flush_out(epoll, c);
}

/* Reads once and answers every complete frame; returns -1 when the connection ended. */
static int on_readable(int epoll, struct connection *c) {
    buffer_reserve(&c->in, 65536);
    ssize_t n = read(c->fd, c->in.bytes + c->in.end, c->in.capacity - c->in.end);
    if (n == 0) return -1;
    if (n < 0) return (errno == EAGAIN || errno == EINTR) ? 0 : -1;
    c->in.end += (size_t)n;

    /* Complete frames are contiguous from in.start, and their echo is the same bytes. */
    size_t begin = c->in.start, cursor = begin, missing = 0;
    while (c->in.end - cursor >= HEADER_LENGTH) {
        uint32_t length = get_u32(c->in.bytes + cursor + 8);
        if (length > MAXIMUM_PAYLOAD) return -1;
        size_t available = c->in.end - cursor;
        if (available < HEADER_LENGTH + (size_t)length) {
            missing = HEADER_LENGTH + (size_t)length - available;
            break;
        }
        cursor += HEADER_LENGTH + (size_t)length;
    }
    c->in.start = cursor;
    if (answer(epoll, c, c->in.bytes + begin, cursor - begin) < 0) return -1;
    /* Room for the rest of a large frame, so one read can complete it. */
    if (missing > 0) buffer_reserve(&c->in, missing);
    return 0;
}

static void *run_worker(void *argument) {
    struct worker *w = argument;
    struct epoll_event events[64];
    for (;;) {
        int count = epoll_wait(w->epoll, events, 64, -1);
        if (count < 0) {
            if (errno == EINTR) continue;
            die("epoll_wait");
        }
        for (int i = 0; i < count; i++) {
            struct connection *c = events[i].data.ptr;
            int failed = 0;
            if (events[i].events & EPOLLOUT) failed = flush_out(w->epoll, c) < 0;
            if (!failed && (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))) failed = on_readable(w->epoll, c) < 0;
            if (failed) close_connection(w->epoll, c);
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    int port = 0, threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--port")) port = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else { fprintf(stderr, "usage: %s --port P [--threads N]\n", argv[0]); return 2; }
    }
    if (threads < 1) threads = 1;
    signal(SIGPIPE, SIG_IGN);

    int listener = socket(AF_INET, SOCK_STREAM, 0);
    if (listener < 0) die("socket");
    int one = 1;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(listener, (struct sockaddr *)&address, sizeof address) < 0) die("bind");
    if (listen(listener, 4096) < 0) die("listen");
    socklen_t size = sizeof address;
    getsockname(listener, (struct sockaddr *)&address, &size);

    struct worker *workers = calloc((size_t)threads, sizeof *workers);
    for (int i = 0; i < threads; i++) {
        workers[i].epoll = epoll_create1(EPOLL_CLOEXEC);
        if (workers[i].epoll < 0) die("epoll_create1");
        pthread_create(&workers[i].thread, NULL, run_worker, &workers[i]);
    }
    printf("listening on 127.0.0.1:%d\n", ntohs(address.sin_port));
    fflush(stdout);

    for (unsigned next = 0;; next++) {
        int fd = accept4(listener, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno == EMFILE || errno == ENFILE) { usleep(1000); continue; }
            die("accept4");
        }
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        struct connection *c = calloc(1, sizeof *c);
        c->fd = fd;
        struct epoll_event event = {.events = EPOLLIN, .data.ptr = c};
        if (epoll_ctl(workers[next % (unsigned)threads].epoll, EPOLL_CTL_ADD, fd, &event) < 0) die("epoll_ctl");
    }
}
