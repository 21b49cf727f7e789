/* Shared by the C baseline's echo server and load generator: buffers, the seed header,
 * the clock and the latency histogram (the same buckets as BenchCore/Histogram.swift). */
#ifndef TETHER_BENCH_COMMON_H
#define TETHER_BENCH_COMMON_H

#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define HEADER_LENGTH 12
#define MAXIMUM_PAYLOAD (16u << 20)

static inline void die(const char *what) {
    fprintf(stderr, "%s: %s\n", what, strerror(errno));
    exit(1);
}

static inline uint64_t now_ns(void) {
    struct timespec spec;
    clock_gettime(CLOCK_MONOTONIC, &spec);
    return (uint64_t)spec.tv_sec * 1000000000u + (uint64_t)spec.tv_nsec;
}

/* A growable byte buffer: bytes [start, end) are pending. */
struct buffer {
    uint8_t *bytes;
    size_t start, end, capacity;
};

/* Makes room for `more` bytes after `end`, moving pending bytes to the front first. */
static inline void buffer_reserve(struct buffer *b, size_t more) {
    if (b->start == b->end) b->start = b->end = 0;
    if (b->capacity - b->end >= more) return;
    size_t pending = b->end - b->start;
    if (b->start > 0 && b->capacity - pending >= more) {
        memmove(b->bytes, b->bytes + b->start, pending);
    } else {
        size_t capacity = b->capacity ? b->capacity : 65536;
        while (capacity - pending < more) capacity *= 2;
        uint8_t *bytes = malloc(capacity);
        if (!bytes) die("malloc");
        if (pending) memcpy(bytes, b->bytes + b->start, pending);
        free(b->bytes);
        b->bytes = bytes;
        b->capacity = capacity;
    }
    b->start = 0;
    b->end = pending;
}

static inline void put_u32(uint8_t *p, uint32_t v) { v = htonl(v); memcpy(p, &v, 4); }
static inline uint32_t get_u32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return ntohl(v); }

/* Log-linear histogram in nanoseconds: exact below 128, then 64 buckets per power of two. */
#define BUCKETS (64 * 58 + 128)
struct histogram {
    uint64_t buckets[BUCKETS];
    uint64_t count, maximum;
};

static inline int histogram_index(uint64_t v) {
    if (v < 128) return (int)v;
    int exponent = (63 - __builtin_clzll(v)) - 6;
    return 64 * exponent + (int)(v >> exponent);
}

static inline uint64_t histogram_bucket_value(int index) {
    if (index < 128) return (uint64_t)index;
    int exponent = index / 64 - 1;
    uint64_t mantissa = (uint64_t)(index - 64 * exponent);
    return (mantissa << exponent) + ((uint64_t)1 << exponent) / 2;
}

static inline void histogram_record(struct histogram *h, uint64_t v) {
    h->buckets[histogram_index(v)]++;
    h->count++;
    if (v > h->maximum) h->maximum = v;
}

static inline void histogram_merge(struct histogram *into, const struct histogram *h) {
    for (int i = 0; i < BUCKETS; i++) into->buckets[i] += h->buckets[i];
    into->count += h->count;
    if (h->maximum > into->maximum) into->maximum = h->maximum;
}

static inline uint64_t histogram_quantile(const struct histogram *h, double q) {
    if (h->count == 0) return 0;
    double r = q * (double)h->count;
    uint64_t rank = (uint64_t)r;
    if ((double)rank < r) rank++;
    if (rank < 1) rank = 1;
    uint64_t seen = 0;
    for (int i = 0; i < BUCKETS; i++) {
        seen += h->buckets[i];
        if (seen >= rank) {
            uint64_t v = histogram_bucket_value(i);
            return v < h->maximum ? v : h->maximum;
        }
    }
    return h->maximum;
}

#endif
