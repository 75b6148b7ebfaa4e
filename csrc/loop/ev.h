/* ev.h -- the readiness backend contract (after Redis's ae_select.c /
 * ae_epoll.c).  One small file per backend implements it; loop.c drives
 * sessions over whichever backend is linked in, so
 * `diff ev_select.c ev_poll.c` shows only what differs between them. */
#ifndef LAB_EV_H
#define LAB_EV_H

#include <stdbool.h>

#define EV_READABLE 1
#define EV_WRITABLE 2
/* With EV_READABLE on a listener that several processes share: wake one or
 * more of them per event, not all (epoll's EPOLLEXCLUSIVE: epoll_ctl(2) says
 * "one or more").  The listener's exclusive waiters are walked in the order
 * they registered and the first one idle in epoll_wait is woken, so the
 * same idle worker tends to take the next connection: load concentrates.
 * Backends that cannot do this ignore it, and every process wakes (the
 * thundering herd). */
#define EV_EXCLUSIVE 4

typedef struct ev ev_t;
typedef struct ev_fired {
    int fd;
    int mask; /* EV_READABLE | EV_WRITABLE */
} ev_fired_t;

/* A backend for descriptors 0 .. setsize-1, or NULL (errno). */
ev_t *ev_create(int setsize);
void ev_free(ev_t *ev);
/* Start watching fd for the events in mask (added to those already
 * watched): 0, or -1 with errno (ERANGE: this backend cannot watch fd). */
int ev_add(ev_t *ev, int fd, int mask);
/* Stop watching fd for the events in mask. */
void ev_del(ev_t *ev, int fd, int mask);
/* Wait up to timeout_ms (-1: forever) for watched events; fill fired[] (room
 * for setsize entries) and return how many, or -1 with errno (EINTR). */
int ev_poll(ev_t *ev, int timeout_ms, ev_fired_t *fired);
/* The largest number of descriptors this backend can watch, below setsize. */
int ev_limit(const ev_t *ev);
/* True if a descriptor is reported when something new happens to it (edge:
 * data arrives, room appears), not while it stays ready (level).  Bytes left
 * unread get no new report until the peer sends more -- and a peer waiting
 * for its reply never will -- so the loop must drain it to EAGAIN. */
bool ev_edge_triggered(void);
const char *ev_name(void);

#endif
