/* exchange.c -- one request/reply exchange as bytes only (see exchange.h):
 * the request each service sends, and the checks on its reply. */
#include "loadgen/exchange.h"

#include "common/util.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const workload_service_names[] = { "top", "echo", "sink", "spin" };
const char *const workload_vary_names[] = { "none", "uniform", "log" };
const char *const workload_spin_dist_names[] = { "fixed", "exp" };

void exchange_start(struct exchange *x, const struct workload *w, long c, long j)
{
    x->w = w;
    x->body_len = workload_body_size(w, c);
    x->head_len = 0;
    if (w->service == SERVICE_TOP)
        x->head_len = (size_t)snprintf(x->head, sizeof x->head, "TOP %ld\n", w->k);
    else if (w->service == SERVICE_SINK)
        x->head_len = (size_t)snprintf(x->head, sizeof x->head, "PUT %zu\n", x->body_len);
    x->spin_us = 0;
    if (w->service == SERVICE_SPIN) {
        x->spin_us = workload_spin_us(w, c, j);
        x->head_len = (size_t)snprintf(x->head, sizeof x->head, "SPIN %ld\n", x->spin_us);
    }
    x->sent = 0;
    x->echoed = 0;
    x->line_len = 0;
    x->lines = 0;
    x->last_ticks = ULLONG_MAX;
    x->server_reads = 0;
    x->why = NULL;
    x->bad_line = NULL;
}

/* The request bytes not yet sent, as up to two pieces; returns how many. */
int exchange_unsent(const struct exchange *x, struct iovec iov[2])
{
    int n = 0;
    if (x->sent < x->head_len)
        iov[n++] = (struct iovec){ (char *)x->head + x->sent, x->head_len - x->sent };
    size_t body_sent = x->sent > x->head_len ? x->sent - x->head_len : 0;
    if (body_sent < x->body_len)
        iov[n++] = (struct iovec){ x->w->payload + body_sent, x->body_len - body_sent };
    return n;
}

void exchange_did_send(struct exchange *x, size_t n)
{
    x->sent += n;
}

static enum reply_status bad(struct exchange *x, const char *why)
{
    x->why = why;
    return REPLY_BAD;
}

/* Read an unsigned decimal that must be followed by `end`; advances *p. */
static bool take_number(const char **p, char end, unsigned long long *out)
{
    const char *s = *p;
    unsigned long long v = 0;
    if (*s < '0' || *s > '9')
        return false;
    for (; *s >= '0' && *s <= '9'; s++) {
        if (v > (ULLONG_MAX - 9) / 10)
            return false;
        v = v * 10 + (unsigned)(*s - '0');
    }
    if (*s != end)
        return false;
    *out = v;
    *p = s + (end != '\0');
    return true;
}

/* top: "<pid> <utime> <stime> <name>", highest utime+stime first, or "END". */
static enum reply_status top_line(struct exchange *x, const char *line)
{
    unsigned long long pid, utime, stime;
    if (strcmp(line, "END") == 0) {
        if (x->lines == 0)
            return bad(x, "END before any process line");
        return REPLY_DONE;
    }
    if (strncmp(line, "ERR", 3) == 0)
        return bad(x, "the server answered ERR");
    const char *p = line;
    if (!take_number(&p, ' ', &pid) || pid == 0 || !take_number(&p, ' ', &utime) ||
        !take_number(&p, ' ', &stime))
        return bad(x, "a process line is not '<pid> <utime> <stime> <name>'");
    if (*p == '\0')
        return bad(x, "a process line has an empty name");
    for (; *p; p++)
        if (*p < 0x20 || *p > 0x7e)
            return bad(x, "a process name has a non-printable byte");
    if (++x->lines > x->w->k)
        return bad(x, "more process lines than the k asked for");
    if (utime + stime > x->last_ticks)
        return bad(x, "process lines are not sorted by utime+stime, highest first");
    x->last_ticks = utime + stime;
    return REPLY_MORE;
}

/* sink: "OK <size> <reads>", reads between 1 and size. */
static enum reply_status sink_line(struct exchange *x, const char *line)
{
    unsigned long long n, reads;
    const char *p = line + 3;
    if (strncmp(line, "ERR", 3) == 0)
        return bad(x, "the server answered ERR");
    if (strncmp(line, "OK ", 3) != 0 || !take_number(&p, ' ', &n) ||
        !take_number(&p, '\0', &reads))
        return bad(x, "the reply is not 'OK <n> <reads>'");
    if (n != x->body_len)
        return bad(x, "OK names a size other than the one sent");
    if (reads > n || (reads < 1 && n > 0))
        return bad(x, "OK reports a read count outside 1..n");
    x->server_reads = (long)reads;
    return REPLY_DONE;
}

/* spin: "OK <us>", the service time sent. */
static enum reply_status spin_line(struct exchange *x, const char *line)
{
    unsigned long long us;
    const char *p = line + 3;
    if (strncmp(line, "ERR", 3) == 0)
        return bad(x, "the server answered ERR");
    if (strncmp(line, "OK ", 3) != 0 || !take_number(&p, '\0', &us))
        return bad(x, "the reply is not 'OK <us>'");
    if (us != (unsigned long long)x->spin_us)
        return bad(x, "OK names a service time other than the one sent");
    return REPLY_DONE;
}

/* Feed reply bytes.  Bytes after a complete reply are a protocol error:
 * the server spoke out of turn. */
enum reply_status exchange_received(struct exchange *x, const char *data, size_t n)
{
    const struct workload *w = x->w;
    if (w->service == SERVICE_ECHO) {
        if (x->echoed + n > x->body_len)
            return bad(x, "more bytes echoed than were sent");
        if (memcmp(data, w->payload + x->echoed, n) != 0)
            return bad(x, "the echoed bytes differ from the bytes sent");
        x->echoed += n;
        return x->echoed == x->body_len ? REPLY_DONE : REPLY_MORE;
    }
    for (size_t i = 0; i < n; i++) {
        if (data[i] != '\n') {
            if (x->line_len == MAX_REPLY_LINE)
                return bad(x, "a reply line is longer than 1 KiB");
            x->line[x->line_len++] = data[i];
            continue;
        }
        x->line[x->line_len] = '\0';
        x->line_len = 0;
        enum reply_status st = w->service == SERVICE_TOP  ? top_line(x, x->line)
                             : w->service == SERVICE_SPIN ? spin_line(x, x->line)
                                                          : sink_line(x, x->line);
        if (st == REPLY_BAD)
            x->bad_line = x->line;
        if (st == REPLY_DONE && i + 1 < n)
            return bad(x, "bytes after the end of the reply");
        if (st != REPLY_MORE)
            return st;
    }
    return REPLY_MORE;
}

void workload_make(struct workload *w, enum service service, long k, long size,
                   enum vary_kind vary, unsigned long seed)
{
    *w = (struct workload){ .service = service, .k = k, .vary = vary, .seed = seed };
    if (service == SERVICE_TOP || service == SERVICE_SPIN)
        return;
    w->size = (size_t)size;
    w->payload = malloc(w->size);
    if (!w->payload)
        die("cannot allocate a %zu-byte payload: ask for a smaller --size", w->size);
    /* Varied bytes (xorshift), so a misordered echo cannot pass. */
    uint32_t state = 2463534242u;
    for (size_t i = 0; i < w->size; i++) {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        w->payload[i] = (unsigned char)state;
    }
}

void workload_free(struct workload *w)
{
    free(w->payload);
    w->payload = NULL;
}

/* splitmix64: a well-mixed 64-bit value from (seed, connection), so each
 * connection's size depends on nothing else: not on the engine, not on the
 * order connections finish in. */
static uint64_t mix(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

size_t workload_body_size(const struct workload *w, long c)
{
    if (w->service == SERVICE_TOP || w->service == SERVICE_SPIN)
        return 0;
    if (w->vary == VARY_NONE || w->size <= VARY_MIN_SIZE)
        return w->size;
    double u = (double)(mix(w->seed * 0x100000001b3ull ^ (uint64_t)c) >> 11) / 9007199254740992.0;
    double lo = VARY_MIN_SIZE, hi = (double)w->size, size;
    if (w->vary == VARY_UNIFORM)
        size = lo + u * (hi - lo);
    else
        size = exp(log(lo) + u * (log(hi) - log(lo)));
    size_t n = (size_t)(size + 0.5);
    return n < VARY_MIN_SIZE ? VARY_MIN_SIZE : n > w->size ? w->size : n;
}

long workload_spin_us(const struct workload *w, long c, long j)
{
    if (w->spin_dist == SPIN_FIXED)
        return w->spin_us;
    /* Exponential by inverse transform, -ln(u) with u in (0, 1], rounded to the
     * microsecond the protocol carries (the mean moves by under 0.5 us). */
    uint64_t bits = mix(mix(w->seed * 0x100000001b3ull ^ (uint64_t)c) ^ (uint64_t)j);
    double u = (double)((bits >> 11) + 1) / 9007199254740992.0;
    double us = -log(u) * (double)w->spin_us;
    return us >= (double)SPIN_MAX_US ? SPIN_MAX_US : (long)(us + 0.5);
}
