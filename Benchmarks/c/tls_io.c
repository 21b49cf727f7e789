/* tls_io: how should a nonblocking epoll loop move bytes between its sockets and OpenSSL?
 *
 * One process, one loopback TCP connection per run, a server thread and a client thread,
 * each with its own level-triggered epoll loop, speaking the seed protocol (12-byte header
 * `type | serial | length`, big-endian, then the payload; the server echoes every frame).
 * Both sides use the same strategy in a run:
 *
 *   A   SSL_set_fd: OpenSSL reads and writes the socket itself (without read_ahead)
 *   A+  the same with SSL_CTX_set_read_ahead(ctx, 1)
 *   B   two memory BIOs: read() up to 64 KiB, BIO_write it in, SSL_read until WANT_READ;
 *       one SSL_write for the turn's frames, BIO_read the ciphertext out, one send()
 *   C   a custom BIO reading straight from the buffer the socket is read into and
 *       appending straight to the send buffer (no memory BIO copy either way)
 *   D   plain TCP, same framing, no TLS: the baseline
 *
 * Like the SDK's loop, every readiness event reads at most 64 KiB, the frames decoded are
 * answered, and everything a turn produced goes out with one send() (one SSL_write for A,
 * where OpenSSL does the sends). TLS 1.3 (OpenSSL's default, TLS_AES_256_GCM_SHA384) with a
 * P-256 self-signed certificate made in memory, which the client does not verify.
 * Workloads, each a closed loop on one connection:
 *
 *   1. 100 requests in flight, 64-byte payloads: requests/s
 *   2. 4 requests in flight, 1 MiB payloads: MB/s of payload, each way
 *
 * Each figure is also divided by the CPU time of both threads (per CPU-s), which a busy
 * machine disturbs less than the wall clock. Every repetition runs all strategies in a
 * rotated order; the table has the medians, the min-max spread and the ratio to D.
 *
 *   cc -O2 -Wall -Wextra -o tls_io Benchmarks/c/tls_io.c -lssl -lcrypto -lpthread
 *   ./tls_io [--seconds 3] [--warmup 0.5] [--repeat 3]     (~2 minutes with the defaults)
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define HEADER 12
#define CHUNK (64 * 1024)   /* bytes read from a socket per readiness event */
#define RECORD (16 * 1024)  /* room offered to each SSL_read */
#define REQUEST_TYPE 0x402u

enum strategy { FD, FD_READ_AHEAD, MEMORY, CUSTOM, PLAIN, STRATEGIES };
#define USES_FD(c) ((c)->strategy == FD || (c)->strategy == FD_READ_AHEAD)
#define USES_BIOS(c) ((c)->strategy == MEMORY || (c)->strategy == CUSTOM)
static const char *strategy_names[STRATEGIES] = {
    "A  SSL_set_fd", "A+ SSL_set_fd, read_ahead", "B  memory BIOs", "C  custom BIO", "D  plain TCP",
};

struct workload { const char *name, *unit; int in_flight; uint32_t size; };
static const struct workload workloads[] = {
    {"100 x 64 B", "req", 100, 64},
    {"4 x 1 MiB", "MB", 4, 1u << 20},
};
#define WORKLOADS (int)(sizeof workloads / sizeof workloads[0])

static void fail(const char *what) {
    fprintf(stderr, "tls_io: %s: %s\n", what, errno ? strerror(errno) : "failed");
    ERR_print_errors_fp(stderr);
    exit(1);
}

static double seconds_now(clockid_t clock) {
    struct timespec t;
    clock_gettime(clock, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void put32(uint8_t *p, uint32_t v) { v = htonl(v); memcpy(p, &v, 4); }
static uint32_t get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return ntohl(v); }

/* Bytes [head, tail) of data are live. */
struct buf { uint8_t *data; size_t head, tail, size; };

static size_t buf_len(const struct buf *b) { return b->tail - b->head; }
static void buf_take(struct buf *b, size_t n) { if ((b->head += n) == b->tail) b->head = b->tail = 0; }
static uint8_t *buf_at(const struct buf *b) { return b->data + b->head; }

/* Room for `want` more bytes at the tail: the live bytes slide to the front, and the
 * buffer doubles until they fit. The live bytes may move. */
static uint8_t *buf_room(struct buf *b, size_t want) {
    size_t live = buf_len(b);
    if (b->size - b->tail >= want) return b->data + b->tail;
    if (b->head > 0) {
        memmove(b->data, b->data + b->head, live);
        b->head = 0;
        b->tail = live;
    }
    if (b->size - live < want) {
        size_t size = b->size ? b->size : CHUNK;
        while (size - live < want) size *= 2;
        if (!(b->data = realloc(b->data, size))) fail("realloc");
        b->size = size;
    }
    return b->data + b->tail;
}

static void buf_append(struct buf *b, const void *bytes, size_t count) {
    memcpy(buf_room(b, count), bytes, count);
    b->tail += count;
}

struct conn {
    int fd, strategy, writing;
    int again;         /* OpenSSL holds input epoll cannot see: run the next turn at once */
    SSL *ssl;
    BIO *rbio, *wbio;  /* B: the memory BIOs, owned by ssl */
    struct buf in;     /* plaintext received, not yet decoded */
    struct buf out;    /* plaintext frames of this turn (and of earlier ones not yet taken) */
    struct buf wire;   /* B, C: ciphertext waiting for send() */
    struct buf rx;     /* B: read() scratch; C: ciphertext read, consumed by the BIO */
};

/* The load a client keeps up and what it measured. */
struct load {
    const struct workload *w;
    const uint8_t *payload;
    uint32_t next_serial, expected_serial;
    uint64_t responses, errors;
    double result[2];  /* req/s or MB/s; the same per CPU-second of both threads */
};

struct run {
    int strategy, listener;
    const struct workload *w;
    SSL_CTX *server_ctx, *client_ctx;
    double warmup, seconds;
    atomic_int stopping, failed;
    struct load load;
};

static EVP_PKEY *identity_key;
static X509 *identity_cert;
static BIO_METHOD *custom_method;

/* ---- C: the custom BIO over the connection's own buffers ---- */

static int custom_read(BIO *bio, char *to, int count) {
    struct conn *c = BIO_get_data(bio);
    size_t have = buf_len(&c->rx), n = have < (size_t)count ? have : (size_t)count;
    BIO_clear_retry_flags(bio);
    if (n == 0) {
        BIO_set_retry_read(bio);
        return -1;
    }
    memcpy(to, buf_at(&c->rx), n);
    buf_take(&c->rx, n);
    return (int)n;
}

static int custom_write(BIO *bio, const char *from, int count) {
    struct conn *c = BIO_get_data(bio);
    BIO_clear_retry_flags(bio);
    buf_append(&c->wire, from, (size_t)count);
    return count;
}

static long custom_ctrl(BIO *bio, int command, long number, void *pointer) {
    struct conn *c = BIO_get_data(bio);
    (void)number, (void)pointer;
    switch (command) {
    case BIO_CTRL_FLUSH: return 1; /* 0 here makes OpenSSL fail the handshake */
    case BIO_CTRL_PENDING: return (long)buf_len(&c->rx);
    case BIO_CTRL_WPENDING: return (long)buf_len(&c->wire);
    default: return 0;
    }
}

static int custom_create(BIO *bio) {
    BIO_set_init(bio, 1);
    return 1;
}

/* ---- socket I/O ---- */

/* One read() of up to CHUNK bytes onto the tail of `b`: 1 for bytes, 0 for none yet,
 * -1 for end of stream or an error. */
static int socket_read(struct conn *c, struct buf *b) {
    ssize_t n = read(c->fd, buf_room(b, CHUNK), CHUNK);
    if (n > 0) {
        b->tail += (size_t)n;
        return 1;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return 0;
    return -1;
}

/* One send() of what `b` holds; the rest waits for EPOLLOUT. */
static int socket_send(struct conn *c, struct buf *b) {
    if (buf_len(b) == 0) return 0;
    ssize_t n = send(c->fd, buf_at(b), buf_len(b), MSG_NOSIGNAL);
    if (n > 0) buf_take(b, (size_t)n);
    else if (n < 0 && errno != EAGAIN && errno != EINTR) return -1;
    return 0;
}

/* B: moves everything OpenSSL wrote into the write memory BIO to the send buffer. */
static void drain_wbio(struct conn *c) {
    size_t pending = BIO_ctrl_pending(c->wbio);
    if (pending == 0) return;
    int n = BIO_read(c->wbio, buf_room(&c->wire, pending), (int)pending);
    if (n != (int)pending) fail("BIO_read from the write BIO");
    c->wire.tail += pending;
}

/* SSL_read into `in` until OpenSSL wants more ciphertext. B and C hold one read()'s worth
 * at most; A stops after a CHUNK like the others, then OpenSSL may still hold bytes. */
static int ssl_read_all(struct conn *c) {
    for (size_t got = 0; got < CHUNK;) {
        int n = SSL_read(c->ssl, buf_room(&c->in, RECORD), RECORD);
        if (n <= 0) {
            int error = SSL_get_error(c->ssl, n);
            return error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE ? 0 : -1;
        }
        c->in.tail += (size_t)n;
        if (USES_FD(c)) got += (size_t)n;
    }
    c->again = SSL_has_pending(c->ssl);
    return 0;
}

/* B, C: one read() of ciphertext where OpenSSL will find it, as socket_read returns. */
static int read_ciphertext(struct conn *c) {
    if (c->strategy == CUSTOM) return socket_read(c, &c->rx);
    c->rx.head = c->rx.tail = 0;
    int status = socket_read(c, &c->rx);
    if (status > 0 && BIO_write(c->rbio, buf_at(&c->rx), (int)buf_len(&c->rx)) != (int)buf_len(&c->rx))
        fail("BIO_write into the read BIO");
    return status;
}

/* The input half of a turn: at most one socket read, decrypted into `in`. */
static int pull(struct conn *c) {
    c->again = 0;
    if (c->strategy == PLAIN) return socket_read(c, &c->in) < 0 ? -1 : 0;
    if (USES_BIOS(c) && read_ciphertext(c) < 0) return -1;
    return ssl_read_all(c);
}

/* The output half of a turn: the frames it produced, in one SSL_write and one send(). */
static int push(struct conn *c, int epoll) {
    struct buf *unsent = &c->out;
    if (c->strategy == PLAIN) {
        if (socket_send(c, &c->out) < 0) return -1;
    } else {
        /* A: after WANT_WRITE the retry passes the same bytes, maybe more behind them, and
         * SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER lets them move. B, C: the BIO takes it all. */
        int n = buf_len(&c->out) > 0 ? SSL_write(c->ssl, buf_at(&c->out), (int)buf_len(&c->out)) : 0;
        if (n > 0) {
            buf_take(&c->out, (size_t)n);
        } else if (n < 0) {
            int error = SSL_get_error(c->ssl, n);
            if (USES_BIOS(c) || (error != SSL_ERROR_WANT_WRITE && error != SSL_ERROR_WANT_READ)) return -1;
        }
        if (USES_BIOS(c)) {
            if (c->strategy == MEMORY) drain_wbio(c);
            if (socket_send(c, &c->wire) < 0) return -1;
            unsent = &c->wire;
        }
    }
    int writing = buf_len(unsent) > 0;
    if (writing != c->writing) {
        struct epoll_event event = {.events = EPOLLIN | (writing ? EPOLLOUT : 0), .data.ptr = c};
        if (epoll_ctl(epoll, EPOLL_CTL_MOD, c->fd, &event) < 0) fail("epoll_ctl");
        c->writing = writing;
    }
    return 0;
}

/* ---- connection setup ---- */

static int wait_for(int fd, short events) {
    struct pollfd p = {.fd = fd, .events = events};
    return poll(&p, 1, 5000) == 1 ? 0 : -1;
}

/* Runs the handshake on the nonblocking socket; for B and C the BIOs are pumped by hand. */
static int handshake(struct conn *c) {
    for (;;) {
        int status = SSL_do_handshake(c->ssl);
        int error = status == 1 ? SSL_ERROR_NONE : SSL_get_error(c->ssl, status);
        if (USES_BIOS(c)) {
            if (c->strategy == MEMORY) drain_wbio(c);
            while (buf_len(&c->wire) > 0) {
                if (socket_send(c, &c->wire) < 0 || (buf_len(&c->wire) > 0 && wait_for(c->fd, POLLOUT) < 0))
                    return -1;
            }
        }
        if (status == 1) return 0;
        if (error == SSL_ERROR_WANT_READ) {
            if (wait_for(c->fd, POLLIN) < 0 || (USES_BIOS(c) && read_ciphertext(c) < 0)) return -1;
        } else if (error == SSL_ERROR_WANT_WRITE) {
            if (wait_for(c->fd, POLLOUT) < 0) return -1;
        } else {
            return -1;
        }
    }
}

static int open_conn(struct conn *c, int fd, int strategy, SSL_CTX *ctx, int server) {
    memset(c, 0, sizeof *c);
    c->fd = fd;
    c->strategy = strategy;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0) fail("fcntl");
    if (strategy == PLAIN) return 0;
    if (!(c->ssl = SSL_new(ctx))) fail("SSL_new");
    if (USES_FD(c)) {
        SSL_set_fd(c->ssl, fd);
    } else if (strategy == MEMORY) {
        c->rbio = BIO_new(BIO_s_mem());
        c->wbio = BIO_new(BIO_s_mem());
        if (!c->rbio || !c->wbio) fail("BIO_new");
        SSL_set_bio(c->ssl, c->rbio, c->wbio);
    } else {
        BIO *bio = BIO_new(custom_method);
        if (!bio) fail("BIO_new");
        BIO_set_data(bio, c);
        SSL_set_bio(c->ssl, bio, bio); /* one reference serves both directions */
    }
    if (server) SSL_set_accept_state(c->ssl);
    else SSL_set_connect_state(c->ssl);
    if (handshake(c) < 0) return -1;
    /* Data may already sit behind the handshake in OpenSSL or in a BIO: look at once. */
    c->again = 1;
    return 0;
}

static void close_conn(struct conn *c) {
    SSL_free(c->ssl);
    close(c->fd);
    struct buf *buffers[] = {&c->in, &c->out, &c->wire, &c->rx};
    for (int i = 0; i < 4; i++) free(buffers[i]->data);
}

/* ---- the two ends ---- */

static void queue_request(struct conn *c, struct load *l) {
    uint32_t size = l->w->size;
    uint8_t *p = buf_room(&c->out, HEADER + (size_t)size);
    put32(p, REQUEST_TYPE);
    put32(p + 4, l->next_serial++);
    put32(p + 8, size);
    memcpy(p + HEADER, l->payload, size);
    c->out.tail += HEADER + (size_t)size;
}

/* Server: every complete request frame is echoed into `out`. */
static void serve(struct conn *c) {
    while (buf_len(&c->in) >= HEADER) {
        size_t total = HEADER + (size_t)get32(buf_at(&c->in) + 8);
        if (buf_len(&c->in) < total) break;
        buf_append(&c->out, buf_at(&c->in), total);
        buf_take(&c->in, total);
    }
}

/* Client: every complete response is counted and answered with the next request. */
static void drive(struct conn *c, struct load *l) {
    while (buf_len(&c->in) >= HEADER) {
        const uint8_t *h = buf_at(&c->in);
        size_t total = HEADER + (size_t)get32(h + 8);
        if (buf_len(&c->in) < total) break;
        if (get32(h) != REQUEST_TYPE || get32(h + 4) != l->expected_serial || total != HEADER + l->w->size)
            l->errors++;
        l->expected_serial++;
        l->responses++;
        buf_take(&c->in, total);
        queue_request(c, l);
    }
}

/* One side's event loop; `l` is NULL on the server. The client ends the run. */
static void event_loop(struct run *r, struct conn *c, struct load *l) {
    int epoll = epoll_create1(0);
    struct epoll_event event = {.events = EPOLLIN, .data.ptr = c};
    if (epoll < 0 || epoll_ctl(epoll, EPOLL_CTL_ADD, c->fd, &event) < 0) fail("epoll");
    double start = seconds_now(CLOCK_MONOTONIC), measure_from = start + r->warmup, end = measure_from + r->seconds;
    double cpu_from = 0;
    uint64_t base = 0;
    int measuring = 0;
    if (l) {
        for (int i = 0; i < l->w->in_flight; i++) queue_request(c, l);
        if (push(c, epoll) < 0) fail("first send");
    }
    while (!atomic_load(&r->stopping)) {
        struct epoll_event ready = {0};
        int n = epoll_wait(epoll, &ready, 1, c->again ? 0 : 100);
        if (n < 0 && errno != EINTR) fail("epoll_wait");
        if (n > 0 || c->again) {
            if ((c->again || (ready.events & (EPOLLIN | EPOLLHUP | EPOLLERR))) && pull(c) < 0) break;
            if (l) drive(c, l);
            else serve(c);
            if (push(c, epoll) < 0) break;
        }
        if (!l) continue;
        double now = seconds_now(CLOCK_MONOTONIC);
        if (!measuring && now >= measure_from) {
            measuring = 1;
            base = l->responses;
            measure_from = now;
            cpu_from = seconds_now(CLOCK_PROCESS_CPUTIME_ID);
        } else if (measuring && now >= end) {
            double units = (double)(l->responses - base) * (l->w->size > 1024 ? l->w->size / 1e6 : 1);
            l->result[0] = units / (now - measure_from);
            l->result[1] = units / (seconds_now(CLOCK_PROCESS_CPUTIME_ID) - cpu_from);
            atomic_store(&r->stopping, 1);
        }
    }
    if (l && !atomic_load(&r->stopping)) {
        fprintf(stderr, "tls_io: %s: the client's connection failed\n", strategy_names[r->strategy]);
        ERR_print_errors_fp(stderr);
        atomic_store(&r->failed, 1);
        atomic_store(&r->stopping, 1);
    }
    close(epoll);
}

/* One end of the connection, from handshake to the end of the run. */
static void run_side(struct run *r, int fd, int server) {
    struct conn c;
    if (open_conn(&c, fd, r->strategy, server ? r->server_ctx : r->client_ctx, server) < 0) {
        fprintf(stderr, "tls_io: %s handshake failed\n", server ? "server" : "client");
        ERR_print_errors_fp(stderr);
        atomic_store(&r->failed, 1);
        atomic_store(&r->stopping, 1);
    } else {
        event_loop(r, &c, server ? NULL : &r->load);
    }
    close_conn(&c);
    ERR_clear_error();
}

static void *server_main(void *argument) {
    struct run *r = argument;
    int fd = accept(r->listener, NULL, NULL);
    if (fd < 0) fail("accept");
    run_side(r, fd, 1);
    return NULL;
}

static void *client_main(void *argument) {
    struct run *r = argument;
    struct sockaddr_in address;
    socklen_t length = sizeof address;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || getsockname(r->listener, (struct sockaddr *)&address, &length) < 0 ||
        connect(fd, (struct sockaddr *)&address, length) < 0)
        fail("connect");
    run_side(r, fd, 0);
    return NULL;
}

/* ---- setup and the matrix ---- */

static void make_identity(void) {
    identity_key = EVP_EC_gen("P-256");
    identity_cert = X509_new();
    if (!identity_key || !identity_cert) fail("key generation");
    X509_set_version(identity_cert, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(identity_cert), 1);
    X509_gmtime_adj(X509_getm_notBefore(identity_cert), -60);
    X509_gmtime_adj(X509_getm_notAfter(identity_cert), 86400);
    X509_set_pubkey(identity_cert, identity_key);
    X509_NAME *name = X509_get_subject_name(identity_cert);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)"localhost", -1, -1, 0);
    X509_set_issuer_name(identity_cert, name);
    if (!X509_sign(identity_cert, identity_key, EVP_sha256())) fail("X509_sign");
}

static SSL_CTX *make_ctx(int server, int strategy) {
    SSL_CTX *ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
    if (!ctx) fail("SSL_CTX_new");
    SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
    SSL_CTX_set_mode(ctx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    if (strategy == FD_READ_AHEAD) SSL_CTX_set_read_ahead(ctx, 1);
    if (server) {
        if (SSL_CTX_use_certificate(ctx, identity_cert) != 1 || SSL_CTX_use_PrivateKey(ctx, identity_key) != 1)
            fail("server identity");
    } else {
        SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
    }
    return ctx;
}

/* One run: a fresh listener, contexts and connection; fills `result` (-1 on failure). */
static void run_once(int strategy, const struct workload *w, const uint8_t *payload, double warmup,
                     double seconds, double result[2]) {
    struct run *r = calloc(1, sizeof *r);
    if (!r) fail("calloc");
    *r = (struct run){.strategy = strategy, .w = w, .warmup = warmup, .seconds = seconds,
                      .load = {.w = w, .payload = payload, .result = {-1, -1}}};
    atomic_init(&r->stopping, 0);
    atomic_init(&r->failed, 0);
    if (strategy != PLAIN) {
        r->server_ctx = make_ctx(1, strategy);
        r->client_ctx = make_ctx(0, strategy);
    }
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    r->listener = socket(AF_INET, SOCK_STREAM, 0);
    if (r->listener < 0 || bind(r->listener, (struct sockaddr *)&address, sizeof address) < 0 || listen(r->listener, 1) < 0)
        fail("listen");
    pthread_t server, client;
    if (pthread_create(&server, NULL, server_main, r) || pthread_create(&client, NULL, client_main, r))
        fail("pthread_create");
    pthread_join(client, NULL);
    pthread_join(server, NULL);
    close(r->listener);
    SSL_CTX_free(r->server_ctx);
    SSL_CTX_free(r->client_ctx);
    int failed = atomic_load(&r->failed) || r->load.errors;
    for (int m = 0; m < 2; m++) result[m] = failed ? -1 : r->load.result[m];
    if (r->load.errors) fprintf(stderr, "tls_io: %llu wrong responses\n", (unsigned long long)r->load.errors);
    free(r);
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double results[WORKLOADS][STRATEGIES][2][99];

int main(int argc, char **argv) {
    double seconds = 3, warmup = 0.5;
    int repeat = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--seconds")) seconds = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--warmup")) warmup = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--repeat")) repeat = atoi(argv[i + 1]);
        else break;
    }
    if (argc % 2 == 0 || repeat < 1 || repeat > 99 || seconds <= 0 || warmup < 0) {
        fprintf(stderr, "usage: %s [--seconds S] [--warmup S] [--repeat N]\n", argv[0]);
        return 2;
    }
    make_identity();
    custom_method = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "tls_io buffers");
    if (!custom_method) fail("BIO_meth_new");
    BIO_meth_set_read(custom_method, custom_read);
    BIO_meth_set_write(custom_method, custom_write);
    BIO_meth_set_ctrl(custom_method, custom_ctrl);
    BIO_meth_set_create(custom_method, custom_create);
    uint8_t *payload = malloc(1u << 20);
    if (!payload) fail("malloc");
    for (size_t i = 0; i < 1u << 20; i++) payload[i] = (uint8_t)(i * 131 + 7);

    printf("%s, TLS 1.3, %d x (%.1f s + %.1f s warm-up) per cell\n", OpenSSL_version(OPENSSL_VERSION),
           repeat, seconds, warmup);
    for (int rep = 0; rep < repeat; rep++) {
        for (int wi = 0; wi < WORKLOADS; wi++) {
            for (int k = 0; k < STRATEGIES; k++) {
                int s = (k + rep * 2 + wi) % STRATEGIES; /* a different order every time */
                double v[2];
                run_once(s, &workloads[wi], payload, warmup, seconds, v);
                results[wi][s][0][rep] = v[0];
                results[wi][s][1][rep] = v[1];
                printf("  run %d  %-11s %-27s %10.0f %s/s %10.0f %s/CPU-s\n", rep + 1, workloads[wi].name,
                       strategy_names[s], v[0], workloads[wi].unit, v[1], workloads[wi].unit);
                fflush(stdout);
            }
        }
    }

    /* Medians, min-max and the ratio of medians to D; CPU-s counts both threads. */
    double median[WORKLOADS][STRATEGIES][2];
    for (int wi = 0; wi < WORKLOADS; wi++)
        for (int s = 0; s < STRATEGIES; s++)
            for (int m = 0; m < 2; m++) {
                double *v = results[wi][s][m];
                qsort(v, (size_t)repeat, sizeof *v, compare_doubles);
                median[wi][s][m] = repeat % 2 ? v[repeat / 2] : (v[repeat / 2 - 1] + v[repeat / 2]) / 2;
            }
    printf("\nmedians of %d runs (min-max), ratio of the medians to D\n\n| strategy |", repeat);
    for (int wi = 0; wi < WORKLOADS; wi++)
        printf(" %s, %s/s | vs D | %s/CPU-s | vs D |", workloads[wi].name, workloads[wi].unit, workloads[wi].unit);
    printf("\n|---|");
    for (int wi = 0; wi < WORKLOADS; wi++) printf("---:|---:|---:|---:|");
    for (int s = 0; s < STRATEGIES; s++) {
        printf("\n| %s |", strategy_names[s]);
        for (int wi = 0; wi < WORKLOADS; wi++)
            for (int m = 0; m < 2; m++) {
                double *v = results[wi][s][m];
                printf(" %.0f (%.0f-%.0f) | %.2f |", median[wi][s][m], v[0], v[repeat - 1],
                       median[wi][s][m] / median[wi][PLAIN][m]);
            }
    }
    printf("\n");
    free(payload);
    BIO_meth_free(custom_method);
    X509_free(identity_cert);
    EVP_PKEY_free(identity_key);
    return 0;
}
