/* events.c -- the event-driven driver: one thread, epoll, many connections.
 *
 * Every connection is a small state machine over the same exchange as the
 * threads driver:
 *
 *   CONNECTING --connected--> HELD --exchange due--> BUSY --reply--> HELD ...
 *        \______________________\_______________________\--> CLOSED
 *
 * All connections (active and idle) connect first and wait at the start
 * gate, as in the threads driver.  Then, in closed loop, each active
 * connection runs its exchanges back to back; in open loop exchange g of
 * the run is due at start + g / rate, exchange j of connection c being
 * g = j * clients + c.  A connection still busy when its next exchange is
 * due sends it as soon as the reply arrives, and that exchange's latency
 * counts from when it was due (corrected for coordinated omission), beside
 * the send-to-reply figure (uncorrected).  Idle connections stay HELD,
 * silent, until the active ones are done.
 *
 * Every wait is bounded: a sweep every SWEEP_NS closes the connects and
 * exchanges past their deadline with ETIMEDOUT; a connection that fails is
 * closed, its failure counted by name, and the others go on.
 *
 * --threads N runs N such loops, as wrk does: thread t owns connections
 * t, t + N, t + 2N ..., each thread its own epoll set, timer and counts.
 * They share only what must be one: the gate (a barrier, then one start
 * time for all), the open loop's schedule (thread t sends exchange g when
 * its connection g % clients is one of its own, at the same start + g /
 * rate), the warm-up count, the failure tally and the count of active
 * connections still open (idle ones are held until every thread is done).
 * Their counts and histograms are added up at the end, so the summary is
 * the one a single thread would print.
 */
#include "loadgen/loadgen.h"

#include "common/net.h"
#include "common/util.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNECTING 512            /* connects in flight: 10,000 SYNs at once overflow backlogs */
#define SWEEP_NS 10000000ull          /* deadlines are checked every 10 ms */
#define MAX_EVENTS 1024
#define TIMER_TOKEN UINT64_MAX        /* the epoll token of the timerfd */

enum phase { CONNECTING, HELD, BUSY, CLOSED };

struct conn {
    long id;                       /* its number in the run (the driver's conns are a subset) */
    int fd;
    enum phase phase;
    bool idle;                     /* held silent, never used for exchanges */
    uint32_t interest;             /* the epoll events asked for now */
    long next;                     /* number of this connection's next exchange */
    long planned;                  /* exchanges this connection is to make */
    uint64_t deadline_ns;          /* of the connect or exchange in progress */
    uint64_t due_ns;               /* when the exchange in progress was due */
    uint64_t sent_ns;              /* when it was actually started */
    struct exchange x;
};

/* What the threads of one run share. */
struct run {
    struct outcome *out;           /* the summary: its failure tally is shared as it goes */
    pthread_barrier_t gate;        /* every thread connected */
    uint64_t start_ns;             /* the gate opened (set by one thread, between two waits) */
    atomic_long completed;         /* exchanges completed, for --warmup N */
    atomic_long active_open;       /* active connections of the whole run not yet closed */
};

struct driver {
    const struct options *o;
    const struct workload *w;
    struct outcome *out;           /* this thread's counts and histograms */
    struct run *run;
    const struct net_addr *addr;
    long thread, threads;          /* it owns the connections c with c % threads == thread */
    long active;                   /* how many of its connections are active (they come first) */
    struct conn *conns;            /* active ones first, then idle ones */
    long total;                    /* its connections, active and idle */
    int epfd, timerfd;
    uint64_t timer_at;             /* when the timerfd is armed to fire; 0 = not armed */
    long connecting;               /* connects in flight */
    long active_open;              /* active connections not yet closed */
    bool open_loop;
    uint64_t start_ns;             /* when the gate opened; 0 until then */
    double ns_per_request;         /* open loop: 1e9 / rate */
    long cursor;                   /* open loop: the next exchange of the run to fall due */
    long run_planned;              /* exchanges in the whole run */
    char buf[65536];
};

/* ------------------------------------------------------------- helpers */

static void set_interest(struct driver *d, struct conn *c, uint32_t events)
{
    if (c->interest == events)
        return;
    struct epoll_event ev = { .events = events, .data.u64 = (uint64_t)(c - d->conns) };
    if (epoll_ctl(d->epfd, EPOLL_CTL_MOD, c->fd, &ev) < 0)
        die_errno("epoll_ctl(MOD)");
    c->interest = events;
}

/* Close a connection; `failure` (0 if none) is counted by name. */
static void conn_close(struct driver *d, struct conn *c, int failure)
{
    if (c->phase == CLOSED)
        return;
    if (failure)
        tally_add(&d->run->out->failures, failure);
    if (c->phase == CONNECTING)
        d->connecting--;
    if (c->idle) {
        if (failure)
            d->out->idle_failed++;
        else if (c->phase == HELD)
            d->out->idle_ok++;
    } else {
        if (failure && c->phase != CONNECTING)
            d->out->lost++;
        d->active_open--;
        atomic_fetch_sub(&d->run->active_open, 1);
    }
    if (c->fd >= 0)
        close(c->fd); /* also takes it out of the epoll set */
    c->fd = -1;
    c->phase = CLOSED;
}

/* When exchange g of the run is due (open loop). */
static uint64_t due_time(const struct driver *d, long g)
{
    return d->start_ns + (uint64_t)((double)g * d->ns_per_request);
}

/* ------------------------------------------------------------- connect */

static void start_connect(struct driver *d, struct conn *c, const struct net_addr *addr)
{
    c->fd = net_connect_addr(addr, true);
    c->phase = CONNECTING;
    d->connecting++;
    if (c->fd < 0) {
        conn_close(d, c, errno);
        return;
    }
    struct epoll_event ev = { .events = EPOLLOUT, .data.u64 = (uint64_t)(c - d->conns) };
    if (epoll_ctl(d->epfd, EPOLL_CTL_ADD, c->fd, &ev) < 0) {
        conn_close(d, c, errno);
        return;
    }
    c->interest = EPOLLOUT;
    c->deadline_ns = now_ns() + (uint64_t)(d->o->connect_timeout_s * 1e9);
}

static void connect_done(struct driver *d, struct conn *c)
{
    if (net_connect_result(c->fd) < 0 || net_set_nodelay(c->fd, d->o->nodelay) < 0) {
        conn_close(d, c, errno);
        return;
    }
    d->connecting--;
    c->phase = HELD;
    if (!c->idle)
        d->out->connected++;
    /* Held connections only listen: the server may close them (lost) but
     * never speak first. */
    set_interest(d, c, EPOLLIN);
}

/* --------------------------------------------------------- an exchange */

/* Send what the socket takes now; then wait for room only if some is left. */
static void conn_send(struct driver *d, struct conn *c)
{
    struct iovec iov[2];
    int pieces = exchange_unsent(&c->x, iov);
    if (pieces) {
        struct msghdr msg = { .msg_iov = iov, .msg_iovlen = (size_t)pieces };
        ssize_t put = sendmsg(c->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (put >= 0) {
            exchange_did_send(&c->x, (size_t)put);
        } else if (errno != EAGAIN && errno != EINTR) {
            conn_close(d, c, errno);
            return;
        }
    }
    set_interest(d, c, EPOLLIN | (exchange_unsent(&c->x, iov) ? EPOLLOUT : 0));
}

static void exchange_begin(struct driver *d, struct conn *c, uint64_t due)
{
    uint64_t now = now_ns();
    exchange_start(&c->x, d->w, c->id);
    c->phase = BUSY;
    c->due_ns = due ? due : now;
    c->sent_ns = now;
    c->deadline_ns = now + (uint64_t)(d->o->timeout_s * 1e9);
    conn_send(d, c);
}

/* The reply is complete: record it, then start or schedule the next one. */
static void exchange_end(struct driver *d, struct conn *c)
{
    uint64_t now = now_ns();
    const struct options *o = d->o;
    struct outcome *out = d->out;
    out->requests_ok++;
    out->server_reads += c->x.server_reads;
    out->body_bytes_ok += (long long)c->x.body_len;
    out->last_reply_ns = now;
    long completed = atomic_fetch_add(&d->run->completed, 1) + 1;
    bool warming_up = (o->warmup_s > 0 && c->due_ns < d->start_ns + (uint64_t)(o->warmup_s * 1e9))
                   || (o->warmup_requests > 0 && completed <= o->warmup_requests);
    if (warming_up) {
        out->warmup_excluded++;
    } else {
        hist_record(&out->corrected, now - c->due_ns);
        hist_record(&out->uncorrected, now - c->sent_ns);
    }

    c->phase = HELD;
    if (++c->next == c->planned) {
        conn_close(d, c, 0);
        return;
    }
    if (!d->open_loop) {
        exchange_begin(d, c, 0);
        return;
    }
    uint64_t due = due_time(d, c->next * o->clients + c->id);
    if (due <= now)
        exchange_begin(d, c, due);  /* overdue: it waited for this reply */
    else
        set_interest(d, c, EPOLLIN); /* release_due() starts it on time */
}

/* Readable (or hung up) during an exchange: take one read. */
static void busy_readable(struct driver *d, struct conn *c)
{
    ssize_t got = recv(c->fd, d->buf, sizeof d->buf, MSG_DONTWAIT);
    if (got == 0) {
        conn_close(d, c, FAIL_EOF);
        return;
    }
    if (got < 0) {
        if (errno != EAGAIN && errno != EINTR)
            conn_close(d, c, errno);
        return;
    }
    struct iovec iov[2];
    enum reply_status st = exchange_received(&c->x, d->buf, (size_t)got);
    if (st == REPLY_DONE && exchange_unsent(&c->x, iov)) {
        c->x.why = "a reply before the whole request was sent";
        st = REPLY_BAD;
    }
    if (st == REPLY_BAD) {
        note_bad_reply(d->run->out, c->id, &c->x);
        conn_close(d, c, FAIL_BADREPLY);
    } else if (st == REPLY_DONE) {
        exchange_end(d, c);
    }
}

/* A held connection became readable: the server closed it, reset it, or
 * spoke out of turn. */
static void held_readable(struct driver *d, struct conn *c)
{
    char byte;
    ssize_t got = recv(c->fd, &byte, 1, MSG_DONTWAIT);
    if (got < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    conn_close(d, c, got == 0 ? FAIL_EOF : got < 0 ? errno : FAIL_BADREPLY);
}

static void dispatch(struct driver *d, struct conn *c, uint32_t events)
{
    switch (c->phase) {
    case CONNECTING:
        connect_done(d, c);
        break;
    case HELD:
        held_readable(d, c);
        break;
    case BUSY: {
        /* Read first: an ERR reply explains a failure better than the
         * EPIPE that sending into the closed connection would give. */
        long next = c->next;
        if (events & (EPOLLIN | EPOLLHUP | EPOLLERR))
            busy_readable(d, c);
        if (c->phase == BUSY && c->next == next && (events & (EPOLLOUT | EPOLLERR)))
            conn_send(d, c);
        break;
    }
    case CLOSED:
        break;
    }
}

/* ------------------------------------------------------------ the loop */

/* Close what is past its deadline. */
static void sweep(struct driver *d, uint64_t now)
{
    for (long i = 0; i < d->total; i++) {
        struct conn *c = &d->conns[i];
        if ((c->phase == CONNECTING || c->phase == BUSY) && c->deadline_ns <= now)
            conn_close(d, c, ETIMEDOUT);
    }
}

/* Open loop: start every exchange now due on a connection of this thread
 * free to send it (a busy one sends it when its reply arrives). */
static void release_due(struct driver *d, uint64_t now)
{
    while (d->cursor < d->run_planned && due_time(d, d->cursor) <= now) {
        long g = d->cursor++, id = g % d->o->clients;
        if (id % d->threads != d->thread)
            continue;  /* another thread's connection: that thread sends it, on the same schedule */
        struct conn *c = &d->conns[id / d->threads];
        if (c->phase == HELD && c->next == g / d->o->clients)
            exchange_begin(d, c, due_time(d, g));
    }
}

/* Arm the timer for the next sweep or the next exchange due, whichever
 * comes first (a timerfd: epoll_wait's milliseconds would make every
 * open-loop send up to 1 ms late). */
static void arm_timer(struct driver *d, uint64_t next_sweep)
{
    uint64_t at = next_sweep;
    if (d->open_loop && d->start_ns && d->cursor < d->run_planned) {
        uint64_t due = due_time(d, d->cursor);
        if (due < at)
            at = due;
    }
    if (at == d->timer_at)
        return;
    struct itimerspec when = {
        .it_value = { .tv_sec = (time_t)(at / 1000000000u), .tv_nsec = (long)(at % 1000000000u) },
    };
    if (timerfd_settime(d->timerfd, TFD_TIMER_ABSTIME, &when, NULL) < 0)
        die_errno("timerfd_settime");
    d->timer_at = at;
}

/* Wait for events (at most until the timer) and handle them. */
static void turn(struct driver *d, uint64_t *next_sweep)
{
    struct epoll_event events[MAX_EVENTS];
    arm_timer(d, *next_sweep);
    int n = epoll_wait(d->epfd, events, MAX_EVENTS, -1);
    if (n < 0 && errno != EINTR)
        die_errno("epoll_wait");
    for (int i = 0; i < n; i++) {
        if (events[i].data.u64 == TIMER_TOKEN) {
            uint64_t expirations;
            if (read(d->timerfd, &expirations, sizeof expirations) < 0 && errno != EAGAIN)
                die_errno("reading the timerfd");
            d->timer_at = 0;
            continue;
        }
        dispatch(d, &d->conns[events[i].data.u64], events[i].events);
    }
    uint64_t now = now_ns();
    if (d->open_loop && d->start_ns)
        release_due(d, now);
    if (now >= *next_sweep) {
        sweep(d, now);
        *next_sweep = now + SWEEP_NS;
    }
}

/* How many exchanges connection `id` of the run makes. */
static long planned_for(const struct driver *d, long id)
{
    if (d->o->requests >= 0)
        return d->o->requests;
    return id < d->run_planned ? (d->run_planned - 1 - id) / d->o->clients + 1 : 0;
}

/* How many of the first n connections of the run thread t owns. */
static long owned(long n, long t, long threads)
{
    return n > t ? (n - t - 1) / threads + 1 : 0;
}

/* The CPU time the calling thread has used, in seconds. */
static double thread_cpu_s(void)
{
    struct timespec cpu;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu) < 0)
        return 0;
    return (double)cpu.tv_sec + (double)cpu.tv_nsec / 1e9;
}

/* One thread's share of the run, from its first connect to its last close. */
static void *run_driver(void *arg)
{
    struct driver *d = arg;
    const struct options *o = d->o;
    struct outcome *out = d->out;
    d->active = owned(o->clients, d->thread, d->threads);
    d->total = d->active + owned(o->idle, d->thread, d->threads);
    d->conns = calloc((size_t)(d->total ? d->total : 1), sizeof *d->conns);
    if (!d->conns)
        die("out of memory for %ld connections", d->total);
    d->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (d->epfd < 0)
        die_errno("epoll_create1");
    d->timerfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (d->timerfd < 0)
        die_errno("timerfd_create");
    struct epoll_event timer_ev = { .events = EPOLLIN, .data.u64 = TIMER_TOKEN };
    if (epoll_ctl(d->epfd, EPOLL_CTL_ADD, d->timerfd, &timer_ev) < 0)
        die_errno("epoll_ctl(ADD timerfd)");

    double cpu_at_start = thread_cpu_s();
    out->began_ns = now_ns();
    d->active_open = d->active;
    for (long i = 0; i < d->total; i++) {
        bool idle = i >= d->active;
        /* Its active connections are thread, thread + N ... of the run; its idle
         * ones the same of the idle connections, numbered after the active. */
        long k = idle ? i - d->active : i;
        long id = (idle ? o->clients : 0) + d->thread + k * d->threads;
        d->conns[i] = (struct conn){ .id = id, .fd = -1, .phase = CLOSED, .idle = idle };
        d->conns[i].planned = idle ? 0 : planned_for(d, id);
    }

    /* Connect everything, a bounded number at a time (the bound shared out
     * among the threads). */
    long most_connecting = MAX_CONNECTING / d->threads > 0 ? MAX_CONNECTING / d->threads : 1;
    uint64_t next_sweep = now_ns() + SWEEP_NS;
    long next_to_connect = 0;
    while (next_to_connect < d->total || d->connecting > 0) {
        while (d->connecting < most_connecting && next_to_connect < d->total)
            start_connect(d, &d->conns[next_to_connect++], d->addr);
        if (d->connecting > 0)
            turn(d, &next_sweep);
    }

    /* The gate opens when every thread has connected, at one time for all. */
    if (pthread_barrier_wait(&d->run->gate) == PTHREAD_BARRIER_SERIAL_THREAD)
        d->run->start_ns = now_ns();
    pthread_barrier_wait(&d->run->gate);
    d->start_ns = out->first_send_ns = d->run->start_ns;
    for (long i = 0; i < d->active; i++) {
        struct conn *c = &d->conns[i];
        if (c->phase != HELD)
            continue;
        if (c->planned == 0)
            conn_close(d, c, 0);
        else if (!d->open_loop)
            exchange_begin(d, c, 0);
    }
    /* Until every thread's active connections are done: this thread's idle
     * ones are held, and watched, to the end of the run. */
    while (atomic_load(&d->run->active_open) > 0)
        turn(d, &next_sweep);

    for (long i = d->active; i < d->total; i++)
        conn_close(d, &d->conns[i], 0);
    out->ended_ns = now_ns();
    out->thread_cpu_s = thread_cpu_s() - cpu_at_start;

    close(d->timerfd);
    close(d->epfd);
    free(d->conns);
    return NULL;
}

void drive_events(const struct options *o, const struct net_addr *addr,
                  const struct workload *w, struct outcome *out)
{
    long threads = o->threads;
    long run_planned = o->requests >= 0 ? o->clients * o->requests : (long)(o->rate_rps * o->duration_s);
    struct run run = { .out = out };
    atomic_init(&run.completed, 0);
    atomic_init(&run.active_open, o->clients);
    if (pthread_barrier_init(&run.gate, NULL, (unsigned)threads) != 0)
        die("pthread_barrier_init failed");
    out->requests_planned = run_planned;

    /* One driver per thread, each with counts of its own (its buffer is too
     * big for a thread's stack); thread 0 is this one. */
    struct driver *drivers = calloc((size_t)threads, sizeof *drivers);
    struct outcome *parts = calloc((size_t)threads, sizeof *parts);
    pthread_t *ids = calloc((size_t)threads, sizeof *ids);
    if (!drivers || !parts || !ids)
        die("out of memory for %ld threads", threads);
    for (long t = 0; t < threads; t++) {
        outcome_init(&parts[t]);
        drivers[t] = (struct driver){
            .o = o, .w = w, .addr = addr, .out = &parts[t], .run = &run, .thread = t, .threads = threads,
            .open_loop = o->rate_rps > 0, .ns_per_request = o->rate_rps > 0 ? 1e9 / o->rate_rps : 0,
            .run_planned = run_planned,
        };
    }
    for (long t = 1; t < threads; t++)
        if ((errno = pthread_create(&ids[t], NULL, run_driver, &drivers[t])) != 0)
            die_errno("pthread_create (thread %ld of %ld)", t + 1, threads);
    run_driver(&drivers[0]);
    for (long t = 1; t < threads; t++)
        pthread_join(ids[t], NULL);

    /* The parts, added up into the one summary. */
    out->began_ns = parts[0].began_ns;
    out->ended_ns = out->last_reply_ns = 0;
    out->first_send_ns = run.start_ns;
    for (long t = 0; t < threads; t++) {
        const struct outcome *p = &parts[t];
        out->connected += p->connected;
        out->lost += p->lost;
        out->requests_ok += p->requests_ok;
        out->server_reads += p->server_reads;
        out->body_bytes_ok += p->body_bytes_ok;
        out->idle_ok += p->idle_ok;
        out->idle_failed += p->idle_failed;
        out->warmup_excluded += p->warmup_excluded;
        out->began_ns = p->began_ns < out->began_ns ? p->began_ns : out->began_ns;
        out->ended_ns = p->ended_ns > out->ended_ns ? p->ended_ns : out->ended_ns;
        out->last_reply_ns = p->last_reply_ns > out->last_reply_ns ? p->last_reply_ns : out->last_reply_ns;
        hist_merge(&out->corrected, &p->corrected);
        hist_merge(&out->uncorrected, &p->uncorrected);
        outcome_free(&parts[t]);
    }
    out->parts = parts;  /* kept for the report's per_thread; outcome_free frees them */
    out->nparts = threads;
    pthread_barrier_destroy(&run.gate);
    free(ids);
    free(drivers);
}
