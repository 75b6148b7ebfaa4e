/* exchange.c -- one request/reply exchange as bytes only (see exchange.h):
 * the request each service sends, and the checks on its reply. */
#include "loadgen/exchange.h"

#include "common/util.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const service_names[] = { "top", "echo", "sink" };

void exchange_start(struct exchange *x, const struct workload *w)
{
    x->w = w;
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
    const struct workload *w = x->w;
    int n = 0;
    if (x->sent < w->head_len)
        iov[n++] = (struct iovec){ (char *)w->head + x->sent, w->head_len - x->sent };
    size_t body_sent = x->sent > w->head_len ? x->sent - w->head_len : 0;
    if (body_sent < w->body_len)
        iov[n++] = (struct iovec){ w->payload + body_sent, w->body_len - body_sent };
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
    if (n != x->w->size)
        return bad(x, "OK names a size other than the one sent");
    if (reads < 1 || reads > n)
        return bad(x, "OK reports a read count outside 1..n");
    x->server_reads = (long)reads;
    return REPLY_DONE;
}

/* Feed reply bytes.  Bytes after a complete reply are a protocol error:
 * the server spoke out of turn. */
enum reply_status exchange_received(struct exchange *x, const char *data, size_t n)
{
    const struct workload *w = x->w;
    if (w->service == SERVICE_ECHO) {
        if (x->echoed + n > w->size)
            return bad(x, "more bytes echoed than were sent");
        if (memcmp(data, w->payload + x->echoed, n) != 0)
            return bad(x, "the echoed bytes differ from the bytes sent");
        x->echoed += n;
        return x->echoed == w->size ? REPLY_DONE : REPLY_MORE;
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
        enum reply_status st = w->service == SERVICE_TOP ? top_line(x, x->line)
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

void workload_make(struct workload *w, enum service service, long k, long size)
{
    w->service = service;
    w->k = k;
    w->size = (size_t)size;
    w->payload = NULL;
    w->body_len = 0;
    if (service == SERVICE_TOP) {
        w->head_len = (size_t)snprintf(w->head, sizeof w->head, "TOP %ld\n", k);
        return;
    }
    w->head_len = service == SERVICE_SINK
        ? (size_t)snprintf(w->head, sizeof w->head, "PUT %ld\n", size) : 0;
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
    w->body_len = w->size;
}

void workload_free(struct workload *w)
{
    free(w->payload);
    w->payload = NULL;
}
