/* exchange.h -- one request/reply exchange of the load generator, as bytes
 * only: what to send next, and whether the bytes received so far make a
 * complete, correct reply.  No I/O here, so every driver (threads, events)
 * uses it unchanged.
 */
#ifndef LOADGEN_EXCHANGE_H
#define LOADGEN_EXCHANGE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/uio.h>

#define MAX_REPLY_LINE 1024 /* LAB.md: a line over 1 KiB is malformed */

enum service { SERVICE_TOP, SERVICE_ECHO, SERVICE_SINK, SERVICE_SPIN };
extern const char *const workload_service_names[];

/* How the echo/sink body size varies between connections: not at all, or
 * drawn per connection from VARY_MIN_SIZE..size, uniformly or log-uniformly
 * (as many 1-10 KB bodies as 1-10 MB ones), reproducibly from a seed. */
enum vary_kind { VARY_NONE, VARY_UNIFORM, VARY_LOG };
extern const char *const workload_vary_names[];
#define VARY_MIN_SIZE 1024

/* spin: each request's service time, the mean of --spin-us: the same for all
 * (fixed) or drawn per exchange from the exponential distribution (exp),
 * reproducibly from the seed, the connection and the exchange's number. */
enum spin_dist { SPIN_FIXED, SPIN_EXP };
extern const char *const workload_spin_dist_names[];
#define SPIN_MAX_US 1000000L           /* the service's bound on one request */

/* What the exchanges of this run send; read-only, shared by all clients. */
struct workload {
    enum service service;
    long k;
    size_t size;                   /* echo/sink: the body size, or the largest one */
    enum vary_kind vary;
    unsigned long seed;
    unsigned char *payload;        /* echo/sink body bytes, `size` of them */
    long spin_us;                  /* spin: the mean service time, microseconds */
    enum spin_dist spin_dist;
};

/* Fill in the request for a service (the payload is malloc'd; dies if it
 * cannot be); workload_free() releases it. */
void workload_make(struct workload *w, enum service service, long k, long size,
                   enum vary_kind vary, unsigned long seed);
void workload_free(struct workload *w);
/* The body size of connection c's exchanges: the same for every run with
 * the same seed (0 for top and spin). */
size_t workload_body_size(const struct workload *w, long c);
/* spin: the service time of exchange j of connection c, microseconds. */
long workload_spin_us(const struct workload *w, long c, long j);

enum reply_status { REPLY_MORE, REPLY_DONE, REPLY_BAD };

/* One exchange in progress: which request bytes are still to be sent, and
 * the reply parsed so far. */
struct exchange {
    const struct workload *w;
    char head[32];                 /* "TOP k\n", "PUT size\n" or "SPIN us\n"; empty for echo */
    size_t head_len;
    size_t body_len;               /* echo/sink body bytes; 0 for top */
    size_t sent;                   /* request bytes sent (head, then body) */
    size_t echoed;                 /* echo: reply bytes checked */
    char line[MAX_REPLY_LINE + 1]; /* top/sink: the reply line being read */
    size_t line_len;
    long lines;                    /* top: process lines so far */
    unsigned long long last_ticks; /* top: utime+stime of the previous line */
    long server_reads;             /* sink: the reads the server reported */
    long spin_us;                  /* spin: the service time asked for */
    const char *why;               /* what was wrong with a bad reply */
    const char *bad_line;          /* and the reply line it was in, if any */
};

/* Start exchange j (0, 1 ...) of connection c (its body size: workload_body_size). */
void exchange_start(struct exchange *x, const struct workload *w, long c, long j);
/* The request bytes not yet sent, as up to two pieces; returns how many. */
int exchange_unsent(const struct exchange *x, struct iovec iov[2]);
void exchange_did_send(struct exchange *x, size_t n);
/* Feed reply bytes.  Bytes after a complete reply are a protocol error. */
enum reply_status exchange_received(struct exchange *x, const char *data, size_t n);

#endif
