/* The C baseline load generator for the seed protocol: a closed loop like bench-client's.
 * Each connection keeps K requests (type 0x402) in flight in K slots; slot s uses serials
 * s + 1, s + 1 + K, ... so a response finds its send time by index. Threads (one per core,
 * at most one per connection) each run a level-triggered epoll loop: one read into a
 * scratch buffer, responses parsed as they stream in (payloads counted, never kept), every
 * complete response answered by the slot's next request, one write per read. Requests with
 * payloads over 4 KiB are gathered with writev from one shared payload, never copied.
 *
 *   client --port P [--host 127.0.0.1] [--connections C] [--in-flight K] [--size BYTES]
 *          [--duration S] [--warmup S] [--threads N]
 *
 * Prints the same RESULT line as bench-client, with impl=c. */
#include "common.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

/* A request waiting to be written when payloads are large: its header, then the shared
 * payload, gathered with writev instead of copied. */
struct pending {
    uint8_t header[HEADER_LENGTH];
    size_t written;
};

struct connection {
    int fd;
    int writing, stopping, finished;
    int outstanding;
    uint64_t *sent_at;
    /* Inbound: a response is parsed as it streams in; its payload is only counted. */
    uint8_t header[HEADER_LENGTH];
    size_t header_have, skipping;
    uint32_t type, serial, length;
    /* Outbound: small requests are copied into `out`; large ones queue in `pending`. */
    struct buffer out;
    struct pending *pending;
    int pending_head, pending_count;
};

struct worker {
    pthread_t thread;
    uint8_t *scratch;
    int epoll;
    struct connection **connections;
    int count;
    uint64_t requests, errors;
    struct histogram latencies;
};

static int in_flight = 1, size = 64;
static uint64_t window_start, window_end;
static uint8_t *payload;
static int gather; /* payloads above COPY_THRESHOLD are written with writev, not copied */
#define COPY_THRESHOLD 4096
#define SCRATCH_SIZE (256 * 1024)

static void set_writing(int epoll, struct connection *c, int writing) {
    if (c->writing == writing) return;
    struct epoll_event event = {.events = EPOLLIN | (writing ? EPOLLOUT : 0), .data.ptr = c};
    epoll_ctl(epoll, EPOLL_CTL_MOD, c->fd, &event);
    c->writing = writing;
}

/* Writes large requests from the pending queue: header and shared payload gathered. */
static int flush_pending(int epoll, struct connection *c) {
    while (c->pending_count > 0) {
        struct iovec vectors[512];
        int count = 0;
        for (int i = 0; i < c->pending_count && count + 2 <= 512; i++) {
            struct pending *p = &c->pending[(c->pending_head + i) % in_flight];
            size_t total = HEADER_LENGTH + (size_t)size, at = p->written;
            if (at < HEADER_LENGTH) {
                vectors[count++] = (struct iovec){p->header + at, HEADER_LENGTH - at};
                at = HEADER_LENGTH;
            }
            if (at < total) vectors[count++] = (struct iovec){payload + (at - HEADER_LENGTH), total - at};
        }
        ssize_t n = writev(c->fd, vectors, count);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) { set_writing(epoll, c, 1); return 0; }
        if (n <= 0) return -1;
        size_t left = (size_t)n;
        while (left > 0) {
            struct pending *p = &c->pending[c->pending_head];
            size_t rest = HEADER_LENGTH + (size_t)size - p->written;
            size_t take = left < rest ? left : rest;
            p->written += take;
            left -= take;
            if (p->written == HEADER_LENGTH + (size_t)size) {
                c->pending_head = (c->pending_head + 1) % in_flight;
                c->pending_count--;
            }
        }
    }
    set_writing(epoll, c, 0);
    return 0;
}

static int flush_out(int epoll, struct connection *c) {
    if (gather) return flush_pending(epoll, c);
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

static void queue_request(struct connection *c, uint32_t serial) {
    uint8_t *p;
    if (gather) {
        struct pending *entry = &c->pending[(c->pending_head + c->pending_count) % in_flight];
        c->pending_count++;
        entry->written = 0;
        p = entry->header;
    } else {
        buffer_reserve(&c->out, HEADER_LENGTH + (size_t)size);
        p = c->out.bytes + c->out.end;
        memcpy(p + HEADER_LENGTH, payload, (size_t)size);
        c->out.end += HEADER_LENGTH + (size_t)size;
    }
    put_u32(p, 0x402);
    put_u32(p + 4, serial);
    put_u32(p + 8, (uint32_t)size);
    c->sent_at[(serial - 1) % (uint32_t)in_flight] = now_ns();
    c->outstanding++;
}

/* A whole response has arrived: count it and send the slot's next request. */
static void on_response(struct worker *w, struct connection *c) {
    uint64_t received = now_ns();
    c->outstanding--;
    if (c->type != 0x402 || c->length != (uint32_t)size) w->errors++;
    if (received >= window_start && received < window_end) {
        w->requests++;
        histogram_record(&w->latencies, received - c->sent_at[(c->serial - 1) % (uint32_t)in_flight]);
    }
    if (received >= window_end) c->stopping = 1;
    if (!c->stopping) queue_request(c, c->serial + (uint32_t)in_flight);
}

/* Reads once and answers every complete response; returns -1 when the connection failed. */
static int on_readable(struct worker *w, struct connection *c) {
    ssize_t n = read(c->fd, w->scratch, SCRATCH_SIZE);
    if (n == 0) return -1;
    if (n < 0) return (errno == EAGAIN || errno == EINTR) ? 0 : -1;
    const uint8_t *p = w->scratch, *end = w->scratch + n;
    while (p < end) {
        if (c->skipping > 0) {
            size_t take = (size_t)(end - p) < c->skipping ? (size_t)(end - p) : c->skipping;
            p += take;
            c->skipping -= take;
            if (c->skipping == 0) on_response(w, c);
            continue;
        }
        size_t take = HEADER_LENGTH - c->header_have;
        if ((size_t)(end - p) < take) take = (size_t)(end - p);
        memcpy(c->header + c->header_have, p, take);
        p += take;
        c->header_have += take;
        if (c->header_have < HEADER_LENGTH) break;
        c->header_have = 0;
        c->type = get_u32(c->header);
        c->serial = get_u32(c->header + 4);
        c->length = get_u32(c->header + 8);
        if (c->length > MAXIMUM_PAYLOAD) return -1;
        c->skipping = c->length;
        if (c->length == 0) on_response(w, c);
    }
    return flush_out(w->epoll, c);
}

static void *run_worker(void *argument) {
    struct worker *w = argument;
    struct epoll_event events[64];
    w->scratch = malloc(SCRATCH_SIZE);
    for (int i = 0; i < w->count; i++) {
        struct connection *c = w->connections[i];
        for (int slot = 0; slot < in_flight; slot++) queue_request(c, (uint32_t)slot + 1);
        if (flush_out(w->epoll, c) < 0) die("write");
    }
    int remaining = w->count;
    while (remaining > 0) {
        if (now_ns() > window_end + 10000000000ull) {
            fprintf(stderr, "client: stalled: %d connections did not finish 10 s after the window closed\n", remaining);
            exit(3);
        }
        int count = epoll_wait(w->epoll, events, 64, 100);
        if (count < 0) {
            if (errno == EINTR) continue;
            die("epoll_wait");
        }
        for (int i = 0; i < count; i++) {
            struct connection *c = events[i].data.ptr;
            if (c->finished) continue;
            int failed = 0;
            if (events[i].events & EPOLLOUT) failed = flush_out(w->epoll, c) < 0;
            if (!failed && (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))) failed = on_readable(w, c) < 0;
            if (failed) w->errors++;
            if (failed || (c->stopping && c->outstanding == 0)) {
                c->finished = 1;
                epoll_ctl(w->epoll, EPOLL_CTL_DEL, c->fd, NULL);
                close(c->fd);
                remaining--;
            }
        }
    }
    return NULL;
}

static const char *usage =
    "usage: client --port P [--host 127.0.0.1] [--connections C] [--in-flight K] [--size BYTES]\n"
    "              [--duration S] [--warmup S] [--threads N]\n";

int main(int argc, char **argv) {
    const char *host = "127.0.0.1";
    int port = 0, connections = 1, threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    double duration = 5, warmup = 1;
    for (int i = 1; i < argc; i += 2) {
        if (i + 1 >= argc) { fputs(usage, stderr); return 2; }
        const char *name = argv[i], *value = argv[i + 1];
        if (!strcmp(name, "--host")) host = value;
        else if (!strcmp(name, "--port")) port = atoi(value);
        else if (!strcmp(name, "--connections")) connections = atoi(value);
        else if (!strcmp(name, "--in-flight")) in_flight = atoi(value);
        else if (!strcmp(name, "--size")) size = atoi(value);
        else if (!strcmp(name, "--duration")) duration = atof(value);
        else if (!strcmp(name, "--warmup")) warmup = atof(value);
        else if (!strcmp(name, "--threads")) threads = atoi(value);
        else if (!strcmp(name, "--impl")) { if (strcmp(value, "c")) { fputs(usage, stderr); return 2; } }
        else { fputs(usage, stderr); return 2; }
    }
    if (port <= 0 || connections < 1 || in_flight < 1 || size < 0 || (uint32_t)size > MAXIMUM_PAYLOAD) {
        fputs(usage, stderr);
        return 2;
    }
    if (threads > connections) threads = connections;
    if (threads < 1) threads = 1;
    signal(SIGPIPE, SIG_IGN);
    gather = size > COPY_THRESHOLD;
    payload = malloc((size_t)size + 1);
    memset(payload, 0x61, (size_t)size);

    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, host, &address.sin_addr) != 1) { fprintf(stderr, "client: %s is not an IPv4 address\n", host); return 2; }

    struct worker *workers = calloc((size_t)threads, sizeof *workers);
    for (int t = 0; t < threads; t++) {
        workers[t].epoll = epoll_create1(EPOLL_CLOEXEC);
        workers[t].connections = calloc((size_t)connections, sizeof(struct connection *));
    }
    int one = 1;
    for (int i = 0; i < connections; i++) {
        struct connection *c = calloc(1, sizeof *c);
        c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (c->fd < 0) die("socket");
        if (connect(c->fd, (struct sockaddr *)&address, sizeof address) < 0) die("connect");
        setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK) < 0) die("fcntl");
        c->sent_at = calloc((size_t)in_flight, sizeof(uint64_t));
        c->pending = calloc((size_t)in_flight, sizeof(struct pending));
        struct worker *w = &workers[i % threads];
        struct epoll_event event = {.events = EPOLLIN, .data.ptr = c};
        if (epoll_ctl(w->epoll, EPOLL_CTL_ADD, c->fd, &event) < 0) die("epoll_ctl");
        w->connections[w->count++] = c;
    }

    window_start = now_ns() + (uint64_t)(warmup * 1e9);
    window_end = window_start + (uint64_t)(duration * 1e9);
    for (int t = 0; t < threads; t++) pthread_create(&workers[t].thread, NULL, run_worker, &workers[t]);

    struct histogram *total = calloc(1, sizeof *total);
    uint64_t requests = 0, errors = 0;
    for (int t = 0; t < threads; t++) {
        pthread_join(workers[t].thread, NULL);
        requests += workers[t].requests;
        errors += workers[t].errors;
        histogram_merge(total, &workers[t].latencies);
    }
    double seconds = (double)(window_end - window_start) / 1e9;
    double rps = (double)requests / seconds;
    if (errors) fprintf(stderr, "client: %llu errors\n", (unsigned long long)errors);
    printf("RESULT impl=c conns=%d inflight=%d size=%d requests=%llu seconds=%.3f rps=%.0f mbps=%.1f "
           "p50_us=%.1f p90_us=%.1f p99_us=%.1f p999_us=%.1f max_us=%.1f errors=%llu\n",
           connections, in_flight, size, (unsigned long long)requests, seconds, rps, rps * size / 1e6,
           histogram_quantile(total, 0.5) / 1e3, histogram_quantile(total, 0.9) / 1e3,
           histogram_quantile(total, 0.99) / 1e3, histogram_quantile(total, 0.999) / 1e3,
           total->maximum / 1e3, (unsigned long long)errors);
    fflush(stdout);
    return errors ? 1 : 0;
}
