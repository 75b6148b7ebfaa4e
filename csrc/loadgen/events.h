/* events.h -- what the files of the event-driven driver (loadgen.h's
 * events_drive) share.  The design, its state machines and the reasons
 * behind them: docs/loadgen-events.md.
 *
 *   events.c            the loop: connect, an exchange, dispatch, the timer, a thread's run
 *   events_reconnect.c  --reconnect: a new connection for every exchange
 *   events_bad.c        --bad N: silent, slow and drip connections
 *   events_inflight.c   exchanges in flight, sampled at random instants (Little's law)
 *
 * One struct driver per thread holds its connections; a struct run is what
 * the threads of one run share.  Nothing here is used outside these files.
 */
#ifndef LOADGEN_EVENTS_H
#define LOADGEN_EVENTS_H

#include "loadgen/loadgen.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* CONN_APART and CONN_QUEUED: --reconnect only, a slot with no connection between two exchanges. */
enum conn_phase {
    CONN_CONNECTING, CONN_HELD, CONN_BUSY, CONN_MISBEHAVING, CONN_APART, CONN_QUEUED, CONN_CLOSED
};
enum conn_role { CONN_ACTIVE, CONN_IDLE, CONN_BAD };

struct conn {
    long id;                       /* its number in the run (the driver's conns are a subset) */
    int fd;
    enum conn_phase phase;
    enum conn_role role;           /* idle: held silent; bad: misbehaving (never exchanges) */
    uint32_t interest;             /* the epoll events asked for now */
    long next;                     /* number of this connection's next exchange */
    long planned;                  /* exchanges this connection is to make */
    uint64_t deadline_ns;          /* of the connect or exchange in progress */
    uint64_t due_ns;               /* when the exchange in progress was due */
    uint64_t sent_ns;              /* when it was actually started */
    uint64_t connect_ns;           /* when connect() was called */
    bool connect_failed;           /* --reconnect: one of its connects failed ... */
    bool exchange_lost;            /* ... one of its connections failed once connected */
    struct exchange x;             /* bad: the request being written, over and over */
};

/* What the threads of one run share. */
struct run {
    struct outcome *out;           /* the summary: its failure tally is shared as it goes */
    pthread_barrier_t gate;        /* every thread connected */
    pthread_barrier_t bad_gate;    /* every thread's bad connections connected (--bad) */
    uint64_t start_ns;             /* the gate opened (set by one thread, between two waits) */
    uint64_t deadline_ns;          /* open loop: the run ends by then (set with start_ns) */
    struct arrivals arrivals;      /* open loop: when each exchange of the run falls due */
    _Atomic uint64_t warm_ns;      /* --warmup N: when the N-th exchange completed */
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
    long held;                     /* ... active and idle (the bad ones come last) */
    struct conn *conns;            /* active ones first, then idle ones, then bad ones */
    long total;                    /* its connections, active, idle and bad */
    int epfd, timerfd;
    uint64_t timer_at;             /* when the timerfd is armed to fire; 0 = not armed */
    long connecting;               /* connects in flight ... */
    long most_connecting;          /* ... at most (its share of MAX_CONNECTING) */
    long *queue;                   /* --reconnect: slots due, waiting for a connect (a FIFO ... */
    long queue_head, queued;       /* ... of `active` places: a slot is in it once at most) */
    long active_open;              /* active connections not yet closed */
    bool open_loop;
    uint64_t start_ns;             /* when the gate opened; 0 until then */
    long cursor;                   /* open loop: the next exchange of the run to fall due */
    long run_planned;              /* exchanges in the whole run */
    long batches_from;             /* ... the first the latency batches count (batches.c) */
    uint64_t next_bad_tick;        /* slow/drip: the next read or byte; 0 = none */
    uint64_t sample_period;        /* in flight: the start of the current sampling period */
    uint64_t next_sample;          /* ... and the instant within it; 0 = not sampling */
    uint64_t rng;                  /* ... drawn from this (xorshift64) */
    char buf[65536];
};

/* events.c */
void events_set_interest(struct driver *d, struct conn *c, uint32_t events);
void events_drop_socket(struct driver *d, struct conn *c);
void events_retire(struct driver *d, struct conn *c, int failure);
void events_close(struct driver *d, struct conn *c, int failure);
uint64_t events_due_time(const struct driver *d, long g);
void events_connect(struct driver *d, struct conn *c, const struct net_addr *addr);

/* events_reconnect.c */
void events_reconnect_queue(struct driver *d, struct conn *c, uint64_t due);
void events_reconnect_next(struct driver *d, struct conn *c);
void events_reconnect_failed(struct driver *d, struct conn *c, int failure);
void events_connect_queued(struct driver *d);

/* events_bad.c */
void events_bad_start(struct driver *d);
void events_bad_tick(struct driver *d, uint64_t now);
void events_bad_event(struct driver *d, struct conn *c, uint32_t events);

/* events_inflight.c */
uint64_t events_random(struct driver *d);
void events_sample_inflight(struct driver *d, uint64_t at);

#endif
