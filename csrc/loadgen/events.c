/* events.c -- the event-driven driver: one thread (or --threads N), epoll,
 * many connections, each a small state machine over the same exchange as the
 * threads driver:
 *
 *   CONNECTING --connected--> HELD --exchange due--> BUSY --reply--> HELD ...
 *        \______________________\_______________________\--> CLOSED
 *
 * (the phases of enum conn_phase, events.h: CONN_CONNECTING, CONN_HELD ...)
 *
 * This file is the loop: connecting (at most MAX_CONNECTING in flight), an
 * exchange (closed loop back to back; open loop on the run's schedule, its
 * latency counted from when it was due), dispatching events, the one timerfd,
 * the sweep that bounds every wait, and a thread's run from its first connect
 * to its last close.  The features beside it are files of their own
 * (events.h); the design and its reasons are in docs/loadgen-events.md.
 */
#include "loadgen/events.h"

#include "common/net.h"
#include "common/util.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

/* MAX_CONNECTING (loadgen.h): connects in flight: 10,000 SYNs at once overflow backlogs */
#define SWEEP_NS 10000000ull          /* deadlines are checked every 10 ms */
#define MAX_EVENTS 1024
#define TIMER_TOKEN UINT64_MAX        /* the epoll token of the timerfd */

/* ------------------------------------------------------------- helpers */

void events_set_interest(struct driver *d, struct conn *c, uint32_t events)
{
    if (c->interest == events)
        return;
    struct epoll_event ev = { .events = events, .data.u64 = (uint64_t)(c - d->conns) };
    if (epoll_ctl(d->epfd, EPOLL_CTL_MOD, c->fd, &ev) < 0)
        die_errno("epoll_ctl(MOD)");
    c->interest = events;
}

/* Close the socket, if any (a connect in flight no longer counts). */
void events_drop_socket(struct driver *d, struct conn *c)
{
    if (c->phase == CONN_CONNECTING)
        d->connecting--;
    if (c->fd >= 0)
        close(c->fd); /* also takes it out of the epoll set */
    c->fd = -1;
}

/* A connection (--reconnect: a client slot) is done for good; `failure` (0 if
 * none) is counted by name. */
void events_retire(struct driver *d, struct conn *c, int failure)
{
    if (c->phase == CONN_CLOSED)
        return;
    if (c->role == CONN_BAD) {
        /* Counted apart: a bad connection never fails the run. */
        if (failure)
            outcome_add_failure(&d->run->out->bad_failures, failure);
        if (c->phase == CONN_CONNECTING)
            d->out->bad_failed_to_connect++;
        else if (failure)
            d->out->bad_closed_by_server++;
        else
            d->out->bad_open_at_end++;
    } else if (failure) {
        outcome_add_failure(&d->run->out->failures, failure);
    }
    if (c->role == CONN_IDLE) {
        if (failure)
            d->out->idle_failed++;
        else if (c->phase == CONN_HELD)
            d->out->idle_ok++;
    } else if (c->role == CONN_ACTIVE) {
        if (d->o->reconnect) {
            /* A slot: ok if none of its connects failed, lost if one of its
             * connections failed once connected. */
            c->connect_failed |= failure && c->phase == CONN_CONNECTING;
            c->exchange_lost |= failure && c->phase == CONN_BUSY;
            d->out->connected += !c->connect_failed;
            d->out->lost += c->exchange_lost;
        } else if (failure && c->phase != CONN_CONNECTING) {
            d->out->lost++;
        }
        d->active_open--;
        atomic_fetch_sub(&d->run->active_open, 1);
    }
    events_drop_socket(d, c);
    c->phase = CONN_CLOSED;
}

/* When exchange g of the run is due (open loop). */
uint64_t events_due_time(const struct driver *d, long g)
{
    return d->start_ns + arrivals_at(&d->run->arrivals, g);
}

/* Close a connection because of `failure` (0 if none), counted by name.  With
 * --reconnect, an active slot's failure ends only the exchange under way. */
void events_close(struct driver *d, struct conn *c, int failure)
{
    if (failure && c->role == CONN_ACTIVE && d->o->reconnect
        && (c->phase == CONN_CONNECTING || c->phase == CONN_BUSY))
        events_reconnect_failed(d, c, failure);
    else
        events_retire(d, c, failure);
}

/* ------------------------------------------------------------- connect */

static void exchange_begin(struct driver *d, struct conn *c, uint64_t due);

void events_connect(struct driver *d, struct conn *c, const struct net_addr *addr)
{
    c->connect_ns = now_ns();
    c->fd = net_connect_addr(addr, true);
    c->phase = CONN_CONNECTING;
    d->connecting++;
    if (c->fd < 0) {
        events_close(d, c, errno);
        return;
    }
    struct epoll_event ev = { .events = EPOLLOUT, .data.u64 = (uint64_t)(c - d->conns) };
    if (epoll_ctl(d->epfd, EPOLL_CTL_ADD, c->fd, &ev) < 0) {
        events_close(d, c, errno);
        return;
    }
    c->interest = EPOLLOUT;
    c->deadline_ns = now_ns() + (uint64_t)(d->o->connect_timeout_s * 1e9);
}

static void connect_done(struct driver *d, struct conn *c)
{
    if (net_connect_result(c->fd) < 0) {
        events_close(d, c, errno);
        return;
    }
    outcome_note_connect(d->out, now_ns() - c->connect_ns);
    if (net_set_nodelay(c->fd, d->o->nodelay) < 0) {
        events_close(d, c, errno);
        return;
    }
    d->connecting--;
    c->phase = CONN_HELD;
    if (c->role == CONN_ACTIVE) {
        d->out->connections_opened++;
        if (d->o->reconnect) {
            exchange_begin(d, c, c->due_ns);  /* the exchange it was opened for */
            return;
        }
        d->out->connected++;
    }
    /* Held connections only listen: the server may close them (lost) but
     * never speak first.  Bad ones watch only for the close (whatever the
     * server says to them is for later, and silent ones never read it). */
    events_set_interest(d, c, c->role == CONN_BAD ? EPOLLRDHUP : EPOLLIN);
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
            events_close(d, c, errno);
            return;
        }
    }
    events_set_interest(d, c, EPOLLIN | (exchange_unsent(&c->x, iov) ? EPOLLOUT : 0));
}

static void exchange_begin(struct driver *d, struct conn *c, uint64_t due)
{
    uint64_t now = now_ns();
    exchange_start(&c->x, d->w, c->id, c->next);
    d->out->requests_sent++;
    c->phase = CONN_BUSY;
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
    if (o->warmup_requests > 0 && completed == o->warmup_requests)
        atomic_store(&d->run->warm_ns, now);  /* the measured window opens */
    bool warming_up = (o->warmup_s > 0 && c->due_ns < d->start_ns + (uint64_t)(o->warmup_s * 1e9))
                   || (o->warmup_requests > 0 && completed <= o->warmup_requests);
    if (warming_up) {
        out->warmup_excluded++;
    } else {
        batches_note_latency(out, c->next * o->clients + c->id - d->batches_from, d->run_planned - d->batches_from,
                     now - c->due_ns, now - c->sent_ns);
    }

    if (o->reconnect) {
        events_reconnect_next(d, c);  /* close (FIN): the reply is all read */
        return;
    }
    c->phase = CONN_HELD;
    if (++c->next == c->planned) {
        events_close(d, c, 0);
        return;
    }
    if (!d->open_loop) {
        exchange_begin(d, c, 0);
        return;
    }
    uint64_t due = events_due_time(d, c->next * o->clients + c->id);
    if (due <= now)
        exchange_begin(d, c, due);  /* overdue: it waited for this reply */
    else
        events_set_interest(d, c, EPOLLIN); /* release_due() starts it on time */
}

/* Readable (or hung up) during an exchange: take one read. */
static void busy_readable(struct driver *d, struct conn *c)
{
    ssize_t got = recv(c->fd, d->buf, sizeof d->buf, MSG_DONTWAIT);
    if (got == 0) {
        events_close(d, c, FAIL_EOF);
        return;
    }
    if (got < 0) {
        if (errno != EAGAIN && errno != EINTR)
            events_close(d, c, errno);
        return;
    }
    struct iovec iov[2];
    enum reply_status st = exchange_received(&c->x, d->buf, (size_t)got);
    if (st == REPLY_DONE && exchange_unsent(&c->x, iov)) {
        c->x.why = "a reply before the whole request was sent";
        st = REPLY_BAD;
    }
    if (st == REPLY_BAD) {
        outcome_note_bad_reply(d->run->out, c->id, &c->x);
        events_close(d, c, FAIL_BADREPLY);
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
    events_close(d, c, got == 0 ? FAIL_EOF : got < 0 ? errno : FAIL_BADREPLY);
}

static void dispatch(struct driver *d, struct conn *c, uint32_t events)
{
    if (c->phase == CONN_CLOSED)
        return;
    if (c->role == CONN_BAD && c->phase != CONN_CONNECTING) {
        events_bad_event(d, c, events);
        return;
    }
    switch (c->phase) {
    case CONN_CONNECTING:
        connect_done(d, c);
        break;
    case CONN_HELD:
        held_readable(d, c);
        break;
    case CONN_BUSY: {
        /* Read first: an ERR reply explains a failure better than the
         * EPIPE that sending into the closed connection would give. */
        long next = c->next;
        if (events & (EPOLLIN | EPOLLHUP | EPOLLERR))
            busy_readable(d, c);
        if (c->phase == CONN_BUSY && c->next == next && (events & (EPOLLOUT | EPOLLERR)))
            conn_send(d, c);
        break;
    }
    case CONN_MISBEHAVING:
    case CONN_APART:
    case CONN_QUEUED:
    case CONN_CLOSED:
        break;
    }
}

/* ------------------------------------------------------------ the loop */

/* Close what is past its deadline; in open loop, at the run's deadline,
 * every active connection (--reconnect: slot) still open (each exchange it
 * still owes has been due for at least --timeout). */
static void sweep(struct driver *d, uint64_t now)
{
    bool run_over = d->open_loop && d->run->deadline_ns && now >= d->run->deadline_ns;
    for (long i = 0; i < d->total; i++) {
        struct conn *c = &d->conns[i];
        if ((c->phase == CONN_CONNECTING || c->phase == CONN_BUSY) && c->deadline_ns <= now)
            events_close(d, c, ETIMEDOUT);  /* --reconnect: that exchange; the slot goes on */
        if (run_over && c->role == CONN_ACTIVE && c->phase != CONN_CLOSED) {
            d->out->deadline_hit = true;
            events_retire(d, c, ETIMEDOUT); /* --reconnect: the slot, and all it still owes */
        }
    }
}

/* Open loop: start every exchange now due on a connection of this thread
 * free to send it (a busy one sends it when its reply arrives; --reconnect:
 * a free slot queues it for its connect). */
static void release_due(struct driver *d, uint64_t now)
{
    while (d->cursor < d->run_planned && events_due_time(d, d->cursor) <= now) {
        long g = d->cursor++, id = g % d->o->clients;
        if (id % d->threads != d->thread)
            continue;  /* another thread's connection: that thread sends it, on the same schedule */
        struct conn *c = &d->conns[id / d->threads];
        if (c->next != g / d->o->clients)
            continue;
        if (c->phase == CONN_HELD) {  /* free when due: how late this loop started it is its own */
            uint64_t due = events_due_time(d, g);
            exchange_begin(d, c, due);
            hist_record(&d->out->lateness, c->sent_ns - due);
        } else if (c->phase == CONN_APART) {
            events_reconnect_queue(d, c, events_due_time(d, g));
        }
    }
}

/* Arm the timer for the next sweep or the next exchange due, whichever
 * comes first (a timerfd: epoll_wait's milliseconds would make every
 * open-loop send up to 1 ms late). */
static void arm_timer(struct driver *d, uint64_t next_sweep)
{
    uint64_t at = next_sweep;
    if (d->open_loop && d->start_ns && d->cursor < d->run_planned) {
        uint64_t due = events_due_time(d, d->cursor);
        if (due < at)
            at = due;
    }
    if (d->next_bad_tick && d->next_bad_tick < at)
        at = d->next_bad_tick;
    if (d->next_sample && d->next_sample < at)
        at = d->next_sample;
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
    if (d->queued)
        events_connect_queued(d);
    arm_timer(d, *next_sweep);
    int n = epoll_wait(d->epfd, events, MAX_EVENTS, -1);
    if (n < 0 && errno != EINTR)
        die_errno("epoll_wait");
    /* In flight, before handling what woke us: every sample instant passed
     * meanwhile, each as of its own instant. */
    for (uint64_t woke = now_ns(); d->next_sample && d->next_sample <= woke;)
        events_sample_inflight(d, d->next_sample);
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
    if (d->next_bad_tick && now >= d->next_bad_tick)
        events_bad_tick(d, now);
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

/* The time the calling thread has waited, runnable, for a CPU (the kernel's
 * run_delay, the second field of /proc/thread-self/schedstat), in seconds; -1
 * where the kernel does not say.  A loop whose CPU time plus this fills its
 * run wanted its CPU all along: another task on it left it none to spare. */
static double thread_waited_s(void)
{
    FILE *f = fopen("/proc/thread-self/schedstat", "re");
    unsigned long long on_cpu_ns, waited_ns;
    int found = f ? fscanf(f, "%llu %llu", &on_cpu_ns, &waited_ns) : 0;
    if (f)
        fclose(f);
    return found == 2 ? (double)waited_ns / 1e9 : -1;
}

/* Connect conns[from .. to), at most `most` in flight, until each is
 * established or has failed. */
static void connect_range(struct driver *d, long from, long to, long most, uint64_t *next_sweep)
{
    long next = from;
    while (next < to || d->connecting > 0) {
        while (d->connecting < most && next < to)
            events_connect(d, &d->conns[next++], d->addr);
        if (d->connecting > 0)
            turn(d, next_sweep);
    }
}

/* One thread's share of the run, from its first connect to its last close. */
static void *run_driver(void *arg)
{
    struct driver *d = arg;
    const struct options *o = d->o;
    struct outcome *out = d->out;
    d->active = owned(o->clients, d->thread, d->threads);
    d->held = d->active + owned(o->idle, d->thread, d->threads);
    d->total = d->held + owned(o->bad, d->thread, d->threads);
    d->conns = calloc((size_t)(d->total ? d->total : 1), sizeof *d->conns);
    d->queue = o->reconnect ? calloc((size_t)(d->active ? d->active : 1), sizeof *d->queue) : NULL;
    if (!d->conns || (o->reconnect && !d->queue))
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

    double cpu_at_start = thread_cpu_s(), waited_at_start = thread_waited_s();
    out->began_ns = now_ns();
    d->active_open = d->active;
    for (long i = 0; i < d->total; i++) {
        enum conn_role role = i < d->active ? CONN_ACTIVE : i < d->held ? CONN_IDLE : CONN_BAD;
        /* Its active connections are thread, thread + N ... of the run; its idle
         * ones the same of the idle connections, numbered after the active; its
         * bad ones the same of the bad connections, numbered after the idle. */
        long k = role == CONN_ACTIVE ? i : role == CONN_IDLE ? i - d->active : i - d->held;
        long id = (role == CONN_ACTIVE ? 0 : role == CONN_IDLE ? o->clients : o->clients + o->idle)
                + d->thread + k * d->threads;
        /* --reconnect: an active slot has no connection until its first exchange. */
        enum conn_phase phase = role == CONN_ACTIVE && o->reconnect ? CONN_APART : CONN_CLOSED;
        d->conns[i] = (struct conn){ .id = id, .fd = -1, .phase = phase, .role = role };
        d->conns[i].planned = role == CONN_ACTIVE ? planned_for(d, id) : 0;
    }

    /* Connect everything, a bounded number at a time (the bound shared out
     * among the threads): the bad connections first, every thread's, then
     * the active and idle ones (--reconnect: the idle ones only). */
    d->most_connecting = MAX_CONNECTING / d->threads > 0 ? MAX_CONNECTING / d->threads : 1;
    uint64_t next_sweep = now_ns() + SWEEP_NS;
    if (o->bad > 0) {
        connect_range(d, d->held, d->total, d->most_connecting, &next_sweep);
        pthread_barrier_wait(&d->run->bad_gate);
    }
    connect_range(d, o->reconnect ? d->active : 0, d->held, d->most_connecting, &next_sweep);

    /* The gate opens when every thread has connected, at one time for all. */
    if (pthread_barrier_wait(&d->run->gate) == PTHREAD_BARRIER_SERIAL_THREAD) {
        d->run->start_ns = now_ns();
        if (d->open_loop && d->run_planned > 0)
            d->run->deadline_ns = d->run->start_ns + arrivals_at(&d->run->arrivals, d->run_planned - 1)
                                + (uint64_t)(o->timeout_s * 1e9);
    }
    pthread_barrier_wait(&d->run->gate);
    d->start_ns = out->first_send_ns = d->run->start_ns;
    d->rng = 0x9E3779B97F4A7C15ull ^ ((uint64_t)o->seed * 0xBF58476D1CE4E5B9ull) ^ (uint64_t)(d->thread + 1);
    d->sample_period = d->start_ns;
    d->next_sample = d->start_ns + events_random(d) % INFLIGHT_INTERVAL_NS;
    events_bad_start(d);
    for (long i = 0; i < d->active; i++) {
        struct conn *c = &d->conns[i];
        if (c->phase != CONN_HELD && c->phase != CONN_APART)
            continue;
        if (c->planned == 0)
            events_retire(d, c, 0);
        else if (d->open_loop)
            continue;  /* release_due() starts (--reconnect: queues) each when due */
        else if (o->reconnect)
            events_reconnect_queue(d, c, 0);
        else
            exchange_begin(d, c, 0);
    }
    /* Until every thread's active connections are done: this thread's idle
     * ones are held, and watched, to the end of the run. */
    while (atomic_load(&d->run->active_open) > 0)
        turn(d, &next_sweep);

    for (long i = d->active; i < d->total; i++)  /* idle and bad ones */
        events_close(d, &d->conns[i], 0);
    out->ended_ns = now_ns();
    out->thread_cpu_s = thread_cpu_s() - cpu_at_start;
    double waited = thread_waited_s();
    out->thread_waited_s = waited >= 0 && waited_at_start >= 0 ? waited - waited_at_start : -1;

    close(d->timerfd);
    close(d->epfd);
    free(d->conns);
    free(d->queue);
    return NULL;
}

void events_drive(const struct options *o, const struct net_addr *addr,
                  const struct workload *w, struct outcome *out)
{
    long threads = o->threads;
    long run_planned = o->requests >= 0 ? o->clients * o->requests : (long)(o->rate_rps * o->duration_s);
    struct run run = { .out = out };
    atomic_init(&run.completed, 0);
    atomic_init(&run.active_open, o->clients);
    atomic_init(&run.warm_ns, 0);
    if (pthread_barrier_init(&run.gate, NULL, (unsigned)threads) != 0 ||
        pthread_barrier_init(&run.bad_gate, NULL, (unsigned)threads) != 0)
        die("pthread_barrier_init failed");
    out->requests_planned = run_planned;
    if (o->rate_rps > 0 && arrivals_init(&run.arrivals, o->arrivals, o->rate_rps, run_planned, o->seed) < 0)
        die("no memory for a Poisson schedule of %ld exchanges (at most %ld: lower --rate or --duration)",
            run_planned, ARRIVALS_MAX_POISSON);

    /* One driver per thread, each with counts of its own (its buffer is too
     * big for a thread's stack); thread 0 is this one. */
    struct driver *drivers = calloc((size_t)threads, sizeof *drivers);
    struct outcome *parts = calloc((size_t)threads, sizeof *parts);
    pthread_t *ids = calloc((size_t)threads, sizeof *ids);
    if (!drivers || !parts || !ids)
        die("out of memory for %ld threads", threads);
    long from = batches_from(o, &run.arrivals, run_planned);
    for (long t = 0; t < threads; t++) {
        outcome_init(&parts[t]);
        drivers[t] = (struct driver){
            .o = o, .w = w, .addr = addr, .out = &parts[t], .run = &run, .thread = t, .threads = threads,
            .open_loop = o->rate_rps > 0,
            .run_planned = run_planned, .batches_from = from,
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
        out->connections_opened += p->connections_opened;
        out->lost += p->lost;
        out->requests_ok += p->requests_ok;
        out->server_reads += p->server_reads;
        out->body_bytes_ok += p->body_bytes_ok;
        out->idle_ok += p->idle_ok;
        out->idle_failed += p->idle_failed;
        out->warmup_excluded += p->warmup_excluded;
        out->requests_sent += p->requests_sent;
        out->deadline_hit |= p->deadline_hit;
        hist_merge(&out->connect, &p->connect);
        out->connects_over_1s += p->connects_over_1s;
        out->connects_over_3s += p->connects_over_3s;
        /* The run's mean in flight: the sum of the threads' means (each samples
         * its own connections at its own instants, so the sum at one instant is
         * never observed; the mean of a sum is the sum of the means).  Its max:
         * the sum of their maxima, exact with one thread, a bound above with more. */
        if (p->inflight_samples > 0)
            out->inflight_mean += p->inflight_sum / (double)p->inflight_samples;
        out->inflight_samples += p->inflight_samples;
        out->inflight_max += p->inflight_max;
        out->bad_open_at_end += p->bad_open_at_end;
        out->bad_closed_by_server += p->bad_closed_by_server;
        out->bad_failed_to_connect += p->bad_failed_to_connect;
        out->bad_bytes_sent += p->bad_bytes_sent;
        out->bad_bytes_received += p->bad_bytes_received;
        out->began_ns = p->began_ns < out->began_ns ? p->began_ns : out->began_ns;
        out->ended_ns = p->ended_ns > out->ended_ns ? p->ended_ns : out->ended_ns;
        out->last_reply_ns = p->last_reply_ns > out->last_reply_ns ? p->last_reply_ns : out->last_reply_ns;
        batches_add_latencies(out, p);
        outcome_free(&parts[t]);
    }
    out->parts = parts;  /* kept for the report's per_thread; outcome_free frees them */
    out->nparts = threads;
    out->deadline_ns = run.deadline_ns;
    if (o->warmup_s > 0)
        out->measure_from_ns = run.start_ns + (uint64_t)(o->warmup_s * 1e9);
    else if (o->warmup_requests > 0)
        out->measure_from_ns = atomic_load(&run.warm_ns);  /* 0: never reached, nothing measured */
    else
        out->measure_from_ns = run.start_ns;
    if (o->rate_rps > 0)
        batches_note_due_in_window(out, &run.arrivals, run.start_ns);
    pthread_barrier_destroy(&run.gate);
    pthread_barrier_destroy(&run.bad_gate);
    arrivals_free(&run.arrivals);
    free(ids);
    free(drivers);
}
