/* ev_select.c -- the select() backend.  glibc's fd_set is a fixed-size bit
 * set of FD_SETSIZE (1024) bits: a descriptor >= FD_SETSIZE cannot be put in
 * one (FD_SET on it would write past the set; _FORTIFY_SOURCE aborts).  The
 * kernel itself copies and scans nfds bits, as many as asked; every call
 * scans all descriptors up to the highest, however few are active, and, when
 * it sleeps, adds a wait-queue entry to every watched socket and removes them
 * all again when it wakes. */
#include "ev.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>

struct ev {
    fd_set rfds, wfds; /* what we watch; select() gets copies */
    int maxfd;         /* highest watched descriptor, -1 if none */
    int setsize;
};

ev_t *ev_create(int setsize)
{
    ev_t *ev = calloc(1, sizeof *ev);
    if (ev == NULL)
        return NULL;
    FD_ZERO(&ev->rfds);
    FD_ZERO(&ev->wfds);
    ev->maxfd = -1;
    ev->setsize = setsize < FD_SETSIZE ? setsize : FD_SETSIZE;
    return ev;
}

void ev_free(ev_t *ev)
{
    free(ev);
}

int ev_add(ev_t *ev, int fd, int mask)
{
    if (fd < 0 || fd >= ev->setsize) {
        errno = ERANGE;
        return -1;
    }
    if (mask & EV_READABLE)
        FD_SET(fd, &ev->rfds);
    if (mask & EV_WRITABLE)
        FD_SET(fd, &ev->wfds);
    if (fd > ev->maxfd)
        ev->maxfd = fd;
    return 0;
}

void ev_del(ev_t *ev, int fd, int mask)
{
    if (fd < 0 || fd >= ev->setsize)
        return;
    if (mask & EV_READABLE)
        FD_CLR(fd, &ev->rfds);
    if (mask & EV_WRITABLE)
        FD_CLR(fd, &ev->wfds);
    while (ev->maxfd >= 0 && !FD_ISSET(ev->maxfd, &ev->rfds) && !FD_ISSET(ev->maxfd, &ev->wfds))
        ev->maxfd--;
}

int ev_poll(ev_t *ev, int timeout_ms, ev_fired_t *fired)
{
    fd_set r = ev->rfds, w = ev->wfds;
    struct timeval tv = { timeout_ms / 1000, (timeout_ms % 1000) * 1000 };
    int ready = select(ev->maxfd + 1, &r, &w, NULL, timeout_ms < 0 ? NULL : &tv);
    if (ready <= 0)
        return ready;
    int n = 0;
    for (int fd = 0; fd <= ev->maxfd; fd++) {
        int mask = (FD_ISSET(fd, &r) ? EV_READABLE : 0) | (FD_ISSET(fd, &w) ? EV_WRITABLE : 0);
        if (mask)
            fired[n++] = (ev_fired_t){ fd, mask };
    }
    return n;
}

int ev_limit(const ev_t *ev)
{
    return ev->setsize;
}

bool ev_edge_triggered(void)
{
    return false;
}

const char *ev_name(void)
{
    return "select";
}
