/* strategies.c -- the write-strategy driver: how a client hands the same
 * bytes to TCP (seed 004), one blocking connection per client thread.
 *
 * Each exchange is "PUT <n>\n" and a body of --repetitions repetitions, each
 * repetition --nbufs buffers of --bufsize bytes, then the server's
 * "OK <n> <reads>".  What differs is how each repetition is written:
 *
 *   many      nbufs write() calls, one per buffer            (seed 004's type 1)
 *   writev    one writev() of the nbufs buffers               (type 2)
 *   single    the buffers copied into one, one write()        (type 3)
 *   msg_more  nbufs send() calls, MSG_MORE on all but the last
 *   cork      TCP_CORK on, nbufs write() calls, TCP_CORK off
 *
 * The request line is written as one more call before the first repetition
 * (many, msg_more, cork), or joined to it (writev: one more iovec; single: one
 * more copy).  So with --repetitions 1 --nodelay off, `many` is the classic
 * write-write-read exchange that meets Nagle's algorithm and delayed ACK.
 *
 * Counted exactly, by construction: every write-family call made for the
 * body (a short write's retry counts too) and, apart, those for request lines
 * written on their own; and from the kernel (TCP_INFO) the segments the
 * connection sent, as the kernel counts them (with GSO, one per super-segment
 * it hands the device, up to 64 KiB on loopback).
 */
#include "loadgen/loadgen.h"

#include "common/util.h"

#include <errno.h>
#include <linux/tcp.h> /* struct tcp_info with tcpi_data_segs_out; TCP_NODELAY, TCP_CORK */
#include <netinet/in.h> /* IPPROTO_TCP */
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <unistd.h>

const char *const strategy_names[] = { "none", "many", "writev", "single", "msg_more", "cork" };

struct writer {
    const struct options *o;
    int fd;
    char **bufs;                   /* nbufs buffers of bufsize bytes */
    char *joined;                  /* single: head + one repetition, copied */
    long calls;                    /* write-family system calls for the body */
    long head_calls;               /* ... and for request lines written on their own */
};

/* One call of the write family, retried on EINTR and counted; -1 on error. */
static ssize_t counted_send(struct writer *w, const void *data, size_t len, int flags, bool head)
{
    for (;;) {
        *(head ? &w->head_calls : &w->calls) += 1;
        ssize_t put = flags ? send(w->fd, data, len, flags | MSG_NOSIGNAL) : write(w->fd, data, len);
        if (put >= 0 || errno != EINTR)
            return put;
    }
}

/* All of data, in as many calls as the socket needs. */
static int send_all(struct writer *w, const char *data, size_t len, int flags, bool head)
{
    while (len > 0) {
        ssize_t put = counted_send(w, data, len, flags, head);
        if (put < 0)
            return errno;
        data += put;
        len -= (size_t)put;
    }
    return 0;
}

/* One writev() of iov[0..n), continued after a short write. */
static int writev_all(struct writer *w, struct iovec *iov, int n)
{
    while (n > 0) {
        w->calls++;
        ssize_t put = writev(w->fd, iov, n);
        if (put < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        while (n > 0 && (size_t)put >= iov->iov_len) {
            put -= (ssize_t)iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (char *)iov->iov_base + put;
            iov->iov_len -= (size_t)put;
        }
    }
    return 0;
}

/* The iovec array of one repetition for writev(): the request line first if
 * there is one (head_len > 0), then the nbufs buffers of `size` bytes each, in
 * order.  Returns how many entries it filled (at most nbufs + 1). */
static int fill_iovec(struct iovec *iov, const char *head, size_t head_len, char *const *bufs, long nbufs,
                      size_t size)
{
    int n = 0;
    /* BEGIN SOLUTION */
    /* STUB: (void)iov; (void)head; (void)head_len; (void)bufs; (void)nbufs; (void)size;
    // ✏️ exercise 4.1 (notebook 04): fill iov[] (the request line first when head_len > 0) and count them */
    if (head_len > 0)
        iov[n++] = (struct iovec){ .iov_base = (char *)head, .iov_len = head_len };
    for (long b = 0; b < nbufs; b++)
        iov[n++] = (struct iovec){ .iov_base = bufs[b], .iov_len = size };
    /* END SOLUTION */
    return n;
}

static int set_cork(struct writer *w, int on)
{
    return setsockopt(w->fd, IPPROTO_TCP, TCP_CORK, &on, sizeof on) < 0 ? errno : 0;
}

/* One repetition of the body, as the strategy says; `head` (may be empty)
 * goes first.  Returns 0 or an errno. */
static int write_repetition(struct writer *w, const char *head, size_t head_len)
{
    const struct options *o = w->o;
    size_t size = (size_t)o->bufsize;
    int err = 0;

    switch (o->strategy) {
    case STRATEGY_WRITEV: {
        struct iovec iov[MAX_NBUFS + 1];
        int n = fill_iovec(iov, head, head_len, w->bufs, o->nbufs, size);
        if (n <= 0)
            return EINVAL; /* nothing to send (an unwritten exercise 4.1): fail now, not at the timeout */
        return writev_all(w, iov, n);
    }
    case STRATEGY_SINGLE: {
        char *p = w->joined;
        memcpy(p, head, head_len);
        p += head_len;
        for (long b = 0; b < o->nbufs; b++, p += size)
            memcpy(p, w->bufs[b], size);
        return send_all(w, w->joined, (size_t)(p - w->joined), 0, false);
    }
    case STRATEGY_CORK:
        if ((err = set_cork(w, 1)) != 0)
            return err;
        __attribute__((fallthrough)); /* the same writes, held back until the cork comes out */
    case STRATEGY_MANY:
        if (head_len && (err = send_all(w, head, head_len, 0, true)) != 0)
            return err;
        for (long b = 0; b < o->nbufs && !err; b++)
            err = send_all(w, w->bufs[b], size, 0, false);
        return err ? err : o->strategy == STRATEGY_CORK ? set_cork(w, 0) : 0;
    case STRATEGY_MSG_MORE:
        if (head_len && (err = send_all(w, head, head_len, MSG_MORE, true)) != 0)
            return err;
        for (long b = 0; b < o->nbufs && !err; b++)
            err = send_all(w, w->bufs[b], size, b + 1 < o->nbufs ? MSG_MORE : 0, false);
        return err;
    case STRATEGY_NONE:
        break;
    }
    return EINVAL;
}

/* Read the reply line "OK <n> <reads>" (bounded by the socket's receive timeout). */
static int read_reply(struct writer *w, struct exchange *x)
{
    char buf[MAX_REPLY_LINE + 1];
    for (;;) {
        ssize_t got = read(w->fd, buf, sizeof buf);
        if (got == 0)
            return FAIL_EOF;
        if (got < 0) {
            if (errno == EINTR)
                continue;
            return errno == EAGAIN ? ETIMEDOUT : errno;
        }
        enum reply_status st = exchange_received(x, buf, (size_t)got);
        if (st == REPLY_BAD)
            return FAIL_BADREPLY;
        if (st == REPLY_DONE)
            return 0;
    }
}

/* A connection's segment counts from TCP_INFO (struct tcp_info, linux/tcp.h), -1 where
 * it could not be read.  tcpi_segs_out and tcpi_data_segs_out count every segment the
 * socket handed to IP, retransmissions included (__tcp_transmit_skb, net/ipv4/tcp_output.c);
 * tcpi_total_retrans counts the retransmitted ones (__tcp_retransmit_skb), so a reader can
 * tell the strategy's own segments from the network's repairs. */
struct seg_counts {
    long all, data, retrans;
};

static struct seg_counts segments(int fd)
{
    struct tcp_info info;
    socklen_t len = sizeof info;
    memset(&info, 0, sizeof info);
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) < 0)
        return (struct seg_counts){ -1, -1, -1 };
    return (struct seg_counts){ (long)info.tcpi_segs_out, (long)info.tcpi_data_segs_out,
                                (long)info.tcpi_total_retrans };
}

struct client {
    const struct options *o;
    const struct net_addr *addr;
    const struct workload *work;
    struct outcome *out;
    long index;
    pthread_t thread;
    uint64_t *latency_ns;          /* its requests' latencies */
    long requests_ok, requests_sent, server_reads, calls, head_calls;
    struct seg_counts segs;        /* TCP_INFO deltas over the exchanges */
    uint64_t connect_ns;           /* connect() .. established; 0: it did not connect */
    long long body_bytes_ok;
    uint64_t send_ns, first_send_ns, last_reply_ns;
    bool connected, lost;
    int failure;
};

static int run_connection(struct client *c, struct writer *w)
{
    const struct options *o = c->o;
    int on = o->nodelay ? 1 : 0;
    struct timeval limit = { .tv_sec = (time_t)o->timeout_s,
                             .tv_usec = (suseconds_t)((o->timeout_s - (double)(time_t)o->timeout_s) * 1e6) };
    if (setsockopt(w->fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on) < 0 ||
        setsockopt(w->fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit) < 0 ||
        setsockopt(w->fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit) < 0)
        return errno;
    struct seg_counts before = segments(w->fd);

    for (long r = 0; r < o->requests; r++) {
        struct exchange x;
        exchange_start(&x, c->work, c->index, r);
        uint64_t t0 = now_ns();
        if (c->first_send_ns == 0)
            c->first_send_ns = t0;
        c->requests_sent++;
        for (long rep = 0; rep < o->repetitions; rep++) {
            int err = write_repetition(w, rep == 0 ? x.head : "", rep == 0 ? x.head_len : 0);
            if (err)
                return err == EAGAIN ? ETIMEDOUT : err;
        }
        exchange_did_send(&x, x.head_len + x.body_len);
        uint64_t sent = now_ns();
        int err = read_reply(w, &x);
        if (err) {
            if (err == FAIL_BADREPLY)
                outcome_note_bad_reply(c->out, c->index, &x);
            return err;
        }
        c->last_reply_ns = now_ns();
        c->send_ns += sent - t0;
        c->latency_ns[c->requests_ok++] = c->last_reply_ns - t0;
        c->server_reads += x.server_reads;
        c->body_bytes_ok += (long long)x.body_len;
    }
    struct seg_counts after = segments(w->fd);
    bool known = before.all >= 0 && after.all >= 0;
    c->segs = known ? (struct seg_counts){ after.all - before.all, after.data - before.data,
                                           after.retrans - before.retrans }
                    : (struct seg_counts){ -1, -1, -1 };
    return 0;
}

static void *client_main(void *arg)
{
    struct client *c = arg;
    const struct options *o = c->o;
    struct writer w = { .o = o, .fd = -1 };
    w.bufs = calloc((size_t)o->nbufs, sizeof *w.bufs);
    w.joined = malloc(32 + (size_t)(o->nbufs * o->bufsize));
    for (long b = 0; w.bufs && b < o->nbufs; b++) {
        w.bufs[b] = malloc((size_t)o->bufsize);
        if (w.bufs[b])
            memset(w.bufs[b], 'a' + (int)(b % 26), (size_t)o->bufsize);
    }
    uint64_t began = now_ns();
    w.fd = net_connect_addr(c->addr, false);  /* blocking: returns established */
    c->connected = w.fd >= 0;
    if (c->connected)
        c->connect_ns = now_ns() - began;
    c->failure = w.fd < 0 ? errno : run_connection(c, &w);
    c->lost = c->connected && c->failure;
    c->calls = w.calls;
    c->head_calls = w.head_calls;
    if (w.fd >= 0)
        close(w.fd);
    for (long b = 0; w.bufs && b < o->nbufs; b++)
        free(w.bufs[b]);
    free(w.bufs);
    free(w.joined);
    return NULL;
}

static int compare_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

void strategy_drive(const struct options *o, const struct net_addr *addr,
                    const struct workload *w, struct outcome *out)
{
    struct client *clients = calloc((size_t)o->clients, sizeof *clients);
    uint64_t *latency = malloc((size_t)(o->clients * o->requests) * sizeof *latency);
    if (!clients || !latency)
        die("out of memory for %ld clients x %ld requests", o->clients, o->requests);
    out->requests_planned = o->clients * o->requests;
    out->began_ns = now_ns();
    for (long i = 0; i < o->clients; i++) {
        clients[i] = (struct client){ .o = o, .addr = addr, .work = w, .out = out, .index = i,
                                      .latency_ns = latency + i * o->requests };
        int err = pthread_create(&clients[i].thread, NULL, client_main, &clients[i]);
        if (err)
            die("cannot start a client thread: %s", strerror(err));
    }
    size_t n = 0;
    for (long i = 0; i < o->clients; i++) {
        struct client *c = &clients[i];
        pthread_join(c->thread, NULL);
        if (c->failure)
            outcome_add_failure(&out->failures, c->failure);
        out->connected += c->connected;
        out->lost += c->lost;
        out->requests_ok += c->requests_ok;
        out->requests_sent += c->requests_sent;
        if (c->connected)
            outcome_note_connect(out, c->connect_ns);
        out->server_reads += c->server_reads;
        out->body_bytes_ok += c->body_bytes_ok;
        out->write_calls += c->calls;
        out->head_write_calls += c->head_calls;
        out->send_ns += c->send_ns;
        bool known = out->segments_out >= 0 && c->segs.all >= 0;
        out->segments_out = known ? out->segments_out + c->segs.all : -1;
        out->data_segments_out = known ? out->data_segments_out + c->segs.data : -1;
        out->retransmitted_segments = known ? out->retransmitted_segments + c->segs.retrans : -1;
        if (c->first_send_ns && (!out->first_send_ns || c->first_send_ns < out->first_send_ns))
            out->first_send_ns = c->first_send_ns;
        if (c->last_reply_ns > out->last_reply_ns)
            out->last_reply_ns = c->last_reply_ns;
        for (long j = 0; j < c->requests_ok; j++)
            batches_note_latency(out, j * o->clients + i, out->requests_planned, c->latency_ns[j],
                                 c->latency_ns[j]);
        memmove(latency + n, c->latency_ns, (size_t)c->requests_ok * sizeof *latency);
        n += (size_t)c->requests_ok;
    }
    out->ended_ns = now_ns();
    out->measure_from_ns = out->first_send_ns;
    qsort(latency, n, sizeof *latency, compare_u64);
    out->exact_ns = latency;  /* freed by outcome_free */
    out->exact_count = n;
    free(clients);
}
