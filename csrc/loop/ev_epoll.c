/* ev_epoll.c -- the epoll backend.  The kernel keeps the watched set
 * (epoll_ctl changes it once, instead of every call passing it in), and
 * epoll_wait returns only the descriptors that are ready: its cost follows
 * the active connections, not the total.
 *
 * Level-triggered, like select and poll: a socket is reported on every call
 * while it stays ready.  ev_epoll_et.c compiles this same file with
 * EV_EPOLL_EDGE_TRIGGERED, which adds EPOLLET: then a socket is reported
 * only when it BECOMES ready, and the loop must drain it (see loop.c). */
#include "ev.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#ifdef EV_EPOLL_EDGE_TRIGGERED
#define TRIGGER EPOLLET
#define NAME "epoll_et"
#else
#define TRIGGER 0
#define NAME "epoll"
#endif

struct ev {
    int epfd;
    int *mask;                  /* mask[fd]: what the kernel watches for fd */
    struct epoll_event *events; /* epoll_wait's output */
    int setsize;
};

ev_t *ev_create(int setsize)
{
    ev_t *ev = calloc(1, sizeof *ev);
    if (ev == NULL)
        return NULL;
    ev->epfd = epoll_create1(EPOLL_CLOEXEC);
    ev->mask = calloc((size_t)setsize, sizeof *ev->mask);
    ev->events = calloc((size_t)setsize, sizeof *ev->events);
    if (ev->epfd < 0 || ev->mask == NULL || ev->events == NULL) {
        ev_free(ev);
        return NULL;
    }
    ev->setsize = setsize;
    return ev;
}

void ev_free(ev_t *ev)
{
    if (ev == NULL)
        return;
    if (ev->epfd >= 0)
        close(ev->epfd);
    free(ev->mask);
    free(ev->events);
    free(ev);
}

static uint32_t epoll_events(int mask)
{
    return TRIGGER | (mask & EV_READABLE ? EPOLLIN : 0) | (mask & EV_WRITABLE ? EPOLLOUT : 0);
}

int ev_add(ev_t *ev, int fd, int mask)
{
    if (fd < 0 || fd >= ev->setsize) {
        errno = ERANGE;
        return -1;
    }
    int old = ev->mask[fd];
    struct epoll_event e = { .events = epoll_events(old | mask), .data.fd = fd };
    /* Several processes sharing one listener: wake only one of them per
     * event, not all (the thundering herd).  Only on the first add. */
    if (old == 0 && (mask & EV_EXCLUSIVE))
        e.events |= EPOLLEXCLUSIVE;
    if (epoll_ctl(ev->epfd, old ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &e) < 0)
        return -1;
    ev->mask[fd] = (old | mask) & (EV_READABLE | EV_WRITABLE);
    return 0;
}

void ev_del(ev_t *ev, int fd, int mask)
{
    if (fd < 0 || fd >= ev->setsize || ev->mask[fd] == 0)
        return;
    int left = ev->mask[fd] & ~mask;
    struct epoll_event e = { .events = epoll_events(left), .data.fd = fd };
    epoll_ctl(ev->epfd, left ? EPOLL_CTL_MOD : EPOLL_CTL_DEL, fd, &e);
    ev->mask[fd] = left;
}

int ev_poll(ev_t *ev, int timeout_ms, ev_fired_t *fired)
{
    int ready = epoll_wait(ev->epfd, ev->events, ev->setsize, timeout_ms);
    if (ready <= 0)
        return ready;
    for (int i = 0; i < ready; i++) {
        uint32_t got = ev->events[i].events;
        /* An error or hang-up is reported as readable: the read then says what happened. */
        int mask = (got & (EPOLLIN | EPOLLERR | EPOLLHUP) ? EV_READABLE : 0) |
                   (got & (EPOLLOUT | EPOLLERR | EPOLLHUP) ? EV_WRITABLE : 0);
        fired[i] = (ev_fired_t){ ev->events[i].data.fd, mask & ev->mask[ev->events[i].data.fd] };
    }
    return ready;
}

int ev_limit(const ev_t *ev)
{
    return ev->setsize;
}

bool ev_edge_triggered(void)
{
    return TRIGGER != 0;
}

const char *ev_name(void)
{
    return NAME;
}
