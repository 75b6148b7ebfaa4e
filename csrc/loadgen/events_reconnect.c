/* events_reconnect.c -- --reconnect: a new connection for every exchange
 * (HTTP/1.0 style).  An active connection is then a slot whose exchanges each
 * connect, send, read the whole reply and close:
 *
 *   APART --exchange due--> QUEUED --connect slot free--> CONNECTING
 *     ^                                                       | connected
 *     \------ reply read, or the exchange failed: close <--- BUSY
 *
 * (the phases of enum conn_phase, events.h: CONN_APART, CONN_QUEUED ...).  A
 * failure fails that one exchange; the slot goes on (docs/loadgen-events.md).
 */
#include "loadgen/events.h"

#include "common/net.h"
#include "common/util.h"

#include <errno.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

/* The slot's exchange is due (`due`; 0 in closed loop: when its connect
 * starts): wait for a connect slot.  The queue is served at the top of every
 * turn(), never from here, so a run of connects that fail at once is a loop,
 * not a recursion. */
void events_reconnect_queue(struct driver *d, struct conn *c, uint64_t due)
{
    c->phase = CONN_QUEUED;
    c->due_ns = due;
    d->queue[(d->queue_head + d->queued++) % d->active] = c - d->conns;
}

/* The exchange is over (its reply read, or failed): its connection is closed;
 * on to the slot's next exchange, queued now if it is due already. */
void events_reconnect_next(struct driver *d, struct conn *c)
{
    events_drop_socket(d, c);
    c->phase = CONN_APART;
    if (++c->next == c->planned) {
        events_retire(d, c, 0);
        return;
    }
    if (!d->open_loop) {
        events_reconnect_queue(d, c, 0);
        return;
    }
    uint64_t due = events_due_time(d, c->next * d->o->clients + c->id);
    if (due <= now_ns())
        events_reconnect_queue(d, c, due);  /* overdue: it waited for this one */
    /* else release_due() queues it when it falls due */
}

/* The exchange failed (its connect, or its connection once connected): only
 * that one exchange; the slot goes on. */
void events_reconnect_failed(struct driver *d, struct conn *c, int failure)
{
    outcome_add_failure(&d->run->out->failures, failure);
    if (c->phase == CONN_CONNECTING)
        c->connect_failed = true;
    else
        c->exchange_lost = true;
    events_reconnect_next(d, c);
}

/* --reconnect: connect the queued slots, oldest first, while connect slots
 * are free.  The wait in the queue is not part of a connect's time; in closed
 * loop it is not part of the exchange's either (it counts from here). */
void events_connect_queued(struct driver *d)
{
    while (d->queued > 0 && d->connecting < d->most_connecting) {
        struct conn *c = &d->conns[d->queue[d->queue_head]];
        d->queue_head = (d->queue_head + 1) % d->active;
        d->queued--;
        if (c->phase != CONN_QUEUED)
            continue;  /* retired meanwhile, at the run's deadline */
        if (!c->due_ns)
            c->due_ns = now_ns();
        events_connect(d, c, d->addr);
    }
}
