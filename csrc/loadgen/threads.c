/* threads.c -- the thread-per-connection driver, the seed reports' client.
 *
 * N clients (one thread each) connect, wait at a start gate until every one
 * of them is connected (or has failed to), then each does R request/reply
 * exchanges and closes.  The gate is what makes "N concurrent clients"
 * true: it is what shows an iterative server serving them one after the
 * other.  Every sample is kept, so the percentiles are exact.
 */
#include "loadgen/loadgen.h"

#include "common/util.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define THREAD_STACK (256 * 1024)      /* 100k threads x 8 MiB default is too much */

/* ------------------------------------ one connection, every wait bounded */

/* Milliseconds left until `deadline_ns` (0 once it has passed). */
static int ms_left(uint64_t deadline_ns)
{
    uint64_t now = now_ns();
    if (now >= deadline_ns)
        return 0;
    uint64_t ms = (deadline_ns - now + 999999) / 1000000;
    return ms > INT_MAX ? INT_MAX : (int)ms;
}

/* poll() one descriptor until the deadline, through EINTR.
 * Returns the revents, 0 on timeout, -1 on error. */
static int wait_for(int fd, short events, uint64_t deadline_ns)
{
    for (;;) {
        struct pollfd p = { .fd = fd, .events = events };
        int r = poll(&p, 1, ms_left(deadline_ns));
        if (r > 0)
            return p.revents;
        if (r == 0 && now_ns() >= deadline_ns)
            return 0;
        if (r < 0 && errno != EINTR)
            return -1;
    }
}

/* Connect within the timeout.  Returns 0 and *fd, or a failure; *took_ns:
 * from the connect() call until it was established (0 if it was not). */
static int conn_open(const struct net_addr *addr, uint64_t timeout_ns, bool nodelay, int *fd,
                     uint64_t *took_ns)
{
    uint64_t began = now_ns(), deadline = began + timeout_ns;
    int s = net_connect_addr(addr, true);
    if (s < 0)
        return errno;
    int failure = 0;
    int ready = wait_for(s, POLLOUT, deadline);
    if (ready == 0)
        failure = ETIMEDOUT;
    else if (ready < 0 || net_connect_result(s) < 0)
        failure = errno;
    else {
        *took_ns = now_ns() - began;  /* established */
        if (net_set_nodelay(s, nodelay) < 0)
            failure = errno;
    }
    if (failure) {
        close(s);
        return failure;
    }
    *fd = s;
    return 0;
}

/* Run one exchange on a non-blocking socket: send what is unsent while
 * reading whatever has arrived (an echo of a large payload would deadlock
 * if we sent it all before reading).  Returns 0 or a failure. */
static int conn_exchange(int fd, struct exchange *x, uint64_t timeout_ns)
{
    uint64_t deadline = now_ns() + timeout_ns;
    char buf[16384];

    for (;;) {
        struct iovec iov[2];
        int pieces = exchange_unsent(x, iov);
        int ready = wait_for(fd, (short)(POLLIN | (pieces ? POLLOUT : 0)), deadline);
        if (ready == 0)
            return ETIMEDOUT;
        if (ready < 0)
            return errno;

        /* Read first: an ERR reply explains a failure better than the
         * EPIPE that sending into the closed connection would give. */
        if (ready & (POLLIN | POLLHUP | POLLERR)) {
            ssize_t got = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
            if (got == 0)
                return FAIL_EOF;
            if (got < 0 && errno != EAGAIN && errno != EINTR)
                return errno;
            if (got > 0) {
                enum reply_status st = exchange_received(x, buf, (size_t)got);
                if (st == REPLY_BAD)
                    return FAIL_BADREPLY;
                if (st == REPLY_DONE) /* a reply before the whole request: out of turn */
                    return exchange_unsent(x, iov) ? FAIL_BADREPLY : 0;
            }
        }
        if (pieces && (ready & (POLLOUT | POLLERR))) {
            struct msghdr msg = { .msg_iov = iov, .msg_iovlen = (size_t)pieces };
            ssize_t put = sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (put >= 0)
                exchange_did_send(x, (size_t)put);
            else if (errno != EAGAIN && errno != EINTR)
                return errno;
        }
    }
}


/* ------------------------------------------------------- the start gate */

/* Opens once every client has arrived.  A client whose connect failed
 * arrives without waiting, so it cannot hold the others hostage; each
 * arrival is bounded by the connect timeout. */
struct start_gate {
    pthread_mutex_t lock;
    pthread_cond_t opened;
    long expected, arrived;
};

static void gate_arrive(struct start_gate *g, bool wait)
{
    pthread_mutex_lock(&g->lock);
    if (++g->arrived == g->expected)
        pthread_cond_broadcast(&g->opened);
    while (wait && g->arrived < g->expected)
        pthread_cond_wait(&g->opened, &g->lock);
    pthread_mutex_unlock(&g->lock);
}

/* ----------------------------------------------------------- the clients */

struct run {
    const struct options *opt;
    const struct net_addr *addr;
    const struct workload *work;
    struct start_gate gate;
    struct outcome *out;
    uint64_t *latency_ns;          /* clients x requests, client-major */
};

struct client {
    struct run *run;
    long index;
    pthread_t thread;
    bool started, connected, lost;
    long requests_ok;
    long requests_sent;            /* exchanges begun */
    uint64_t connect_ns;           /* connect() .. established; 0: it did not connect */
    long server_reads;             /* sink: summed over its exchanges */
    long long body_bytes_ok;       /* echo/sink body bytes of its completed exchanges */
    uint64_t began_ns, ended_ns;   /* first connect attempt .. closed */
    uint64_t first_send_ns, last_reply_ns; /* 0 until it sent, or got a reply */
};

static void *client_main(void *arg)
{
    struct client *c = arg;
    struct run *run = c->run;
    uint64_t *latency = run->latency_ns + c->index * run->opt->requests;
    struct exchange x;
    int fd = -1;

    c->began_ns = now_ns();
    int failure = conn_open(run->addr, (uint64_t)(run->opt->connect_timeout_s * 1e9), run->opt->nodelay, &fd,
                            &c->connect_ns);
    gate_arrive(&run->gate, failure == 0);
    c->connected = failure == 0;

    for (long i = 0; failure == 0 && i < run->opt->requests; i++) {
        exchange_start(&x, run->work, c->index, i);
        uint64_t t0 = now_ns();
        if (c->first_send_ns == 0)
            c->first_send_ns = t0;
        c->requests_sent++;
        failure = conn_exchange(fd, &x, (uint64_t)(run->opt->timeout_s * 1e9));
        if (failure == 0) {
            c->last_reply_ns = now_ns();
            latency[c->requests_ok++] = c->last_reply_ns - t0;
            c->server_reads += x.server_reads;
            c->body_bytes_ok += (long long)x.body_len;
        } else if (failure == FAIL_BADREPLY) {
            outcome_note_bad_reply(run->out, c->index, &x);
        }
    }
    if (failure)
        outcome_add_failure(&run->out->failures, failure);
    c->lost = c->connected && failure;
    if (fd >= 0)
        close(fd);
    c->ended_ns = now_ns();
    return NULL;
}

static void run_clients(struct run *run, struct client *clients)
{
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, THREAD_STACK);
    for (long i = 0; i < run->opt->clients; i++) {
        struct client *c = &clients[i];
        *c = (struct client){ .run = run, .index = i };
        int err = pthread_create(&c->thread, &attr, client_main, c);
        c->started = err == 0;
        if (!c->started) {
            /* No thread for this client: count it as a failed connect. */
            c->began_ns = c->ended_ns = now_ns();
            outcome_add_failure(&run->out->failures, err);
            gate_arrive(&run->gate, false);
        }
    }
    pthread_attr_destroy(&attr);
    for (long i = 0; i < run->opt->clients; i++)
        if (clients[i].started)
            pthread_join(clients[i].thread, NULL);
}

/* ------------------------------------------------------------ the result */

static int compare_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Sum up the clients; gather every sample at the front, sorted. */
static void collect(struct run *run, const struct client *clients)
{
    struct outcome *out = run->out;
    size_t n = 0;
    out->began_ns = UINT64_MAX;
    out->ended_ns = 0;
    for (long i = 0; i < run->opt->clients; i++) {
        const struct client *c = &clients[i];
        out->connected += c->connected;
        out->lost += c->lost;
        out->requests_ok += c->requests_ok;
        out->requests_sent += c->requests_sent;
        if (c->connect_ns)
            outcome_note_connect(out, c->connect_ns);
        out->server_reads += c->server_reads;
        out->body_bytes_ok += c->body_bytes_ok;
        if (c->first_send_ns && (!out->first_send_ns || c->first_send_ns < out->first_send_ns))
            out->first_send_ns = c->first_send_ns;
        if (c->last_reply_ns > out->last_reply_ns)
            out->last_reply_ns = c->last_reply_ns;
        if (c->began_ns < out->began_ns) out->began_ns = c->began_ns;
        if (c->ended_ns > out->ended_ns) out->ended_ns = c->ended_ns;
        const uint64_t *mine = run->latency_ns + i * run->opt->requests;
        for (long j = 0; j < c->requests_ok; j++)  /* exchange j of client i: j x clients + i of the plan */
            batches_note_latency(out, j * run->opt->clients + i, out->requests_planned, mine[j], mine[j]);
        memmove(run->latency_ns + n, mine, (size_t)c->requests_ok * sizeof *mine);
        n += (size_t)c->requests_ok;
    }
    out->measure_from_ns = out->first_send_ns;  /* no warm-up in closed loop */
    qsort(run->latency_ns, n, sizeof *run->latency_ns, compare_u64);
    out->exact_ns = run->latency_ns;
    out->exact_count = n;
}

void threads_drive(const struct options *o, const struct net_addr *addr,
                   const struct workload *w, struct outcome *out)
{
    struct run run = { .opt = o, .addr = addr, .work = w, .out = out };
    pthread_mutex_init(&run.gate.lock, NULL);
    pthread_cond_init(&run.gate.opened, NULL);
    run.gate.expected = o->clients;
    size_t samples = (size_t)(o->clients * o->requests);
    run.latency_ns = malloc((samples ? samples : 1) * sizeof *run.latency_ns);
    struct client *clients = calloc((size_t)o->clients, sizeof *clients);
    if (!run.latency_ns || !clients)
        die("out of memory for %ld clients x %ld requests", o->clients, o->requests);

    out->requests_planned = o->clients * o->requests;
    run_clients(&run, clients);
    collect(&run, clients);  /* out now owns run.latency_ns */

    free(clients);
    pthread_cond_destroy(&run.gate.opened);
    pthread_mutex_destroy(&run.gate.lock);
}
