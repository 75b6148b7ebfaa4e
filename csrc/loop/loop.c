/* loop.c -- the event loop: wait for whichever sockets are ready, then do
 * only what will not block.  Each connection is a session (bytes in, bytes
 * out) and a mask of what we wait for: readable while the session takes
 * input, writable while it has output the socket did not take.
 *
 * With an edge-triggered backend (epoll_et) the loop must work differently,
 * and the differences are marked "edge": see serve_client_edge().
 *
 * --idle-timeout S: each connection remembers when bytes last moved on it,
 * either way; while connections are open the loop wakes at least every S/4
 * and shed_idle() closes those idle for S or more.  So a connection is shed
 * between S and about 1.25 S after its last progress -- a client that
 * sends nothing, and one whose replies stay unread (output stuck), alike.
 *
 * Counters (server_main.h): listener_wakeups counts the rounds the backend
 * reported the listener ready; futile_accepts those whose first accept()
 * found nothing -- another process sharing the listener took the
 * connection (select_fork's herd, or an epoll_workers worker told late). */
#include "loop.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "common/net.h"
#include "common/util.h"
#include "loop/ev.h"

#define MAX_SETSIZE (1 << 20)
#define ACCEPTS_PER_WAKEUP 64  /* let clients already connected have their turn */
#define TRANSFERS_PER_TURN 16  /* edge: reads+writes for one client before the next one's turn */
#define SWEEPS_PER_TIMEOUT 4   /* --idle-timeout: look for idle connections every S/4 */

struct conn {
    session_t *session; /* NULL: no connection on this descriptor */
    int mask;           /* what the backend watches for it */
    /* edge: readiness reported and not yet used up by a read/write that
     * said EAGAIN; and whether the client is on the `again` list. */
    bool can_read, can_write, queued;
    uint64_t last_active_ns; /* when bytes last moved, either way (now_ns()) */
};

struct loop {
    ev_t *ev;
    ev_fired_t *fired;
    struct conn *conns; /* indexed by descriptor */
    int setsize;
    const struct server_config *cfg;
    int nconns;         /* open connections */
    int fd_end;         /* every connection's descriptor is below this */
    uint64_t idle_ns;   /* --idle-timeout; 0: never shed */
    uint64_t next_sweep_ns;
    /* edge: work left over when a turn ended, done next round without waiting */
    bool edge;
    bool accept_again;
    int *again, nagain;
};

/* Watch fd for exactly `want`. */
static void watch(struct loop *l, int fd, int want)
{
    struct conn *c = &l->conns[fd];
    if (want & ~c->mask)
        ev_add(l->ev, fd, want & ~c->mask); /* cannot fail: fd was accepted by ev_add */
    if (c->mask & ~want)
        ev_del(l->ev, fd, c->mask & ~want);
    c->mask = want;
}

static void close_conn(struct loop *l, int fd)
{
    watch(l, fd, 0);
    session_free(l->conns[fd].session);
    l->conns[fd] = (struct conn){ 0 };
    l->nconns--;
    close(fd);
}

/* --idle-timeout: close every connection on which nothing moved, either
 * way, for l->idle_ns or more (`now`: now_ns() at the call), and count each
 * in server_counters.shed_idle.  Connections are the slots of l->conns
 * below l->fd_end whose session is not NULL; close_conn() zeroes a slot,
 * so closing while walking is safe. */
static void shed_idle(struct loop *l, uint64_t now)
{
    /* BEGIN SOLUTION */
    /* STUB: (void)l; (void)now; // ✏️ exercise 6.2 (notebook 06): close the connections idle for l->idle_ns or more */
    for (int fd = 0; fd < l->fd_end; fd++) {
        struct conn *c = &l->conns[fd];
        if (c->session != NULL && now - c->last_active_ns >= l->idle_ns) {
            close_conn(l, fd);
            atomic_fetch_add_explicit(&server_counters.shed_idle, 1, memory_order_relaxed);
        }
    }
    /* END SOLUTION */
}

/* How long ev_poll may sleep: for ever, unless connections may need
 * shedding -- then until the next sweep is due (at least 1 ms). */
static int poll_timeout_ms(const struct loop *l, uint64_t now)
{
    if (l->idle_ns == 0 || l->nconns == 0)
        return -1;
    if (now >= l->next_sweep_ns)
        return 0;
    return (int)((l->next_sweep_ns - now + 999999) / 1000000);
}

/* A connection the backend cannot watch: say why (at most once a second), close it. */
static void refuse(struct loop *l, int fd, int err)
{
    static time_t last_warning;
    if (time(NULL) != last_warning) { /* at most one warning a second */
        last_warning = time(NULL);
        if (err == 0)
            warn("descriptor %d is too high for %s, which can watch only descriptors below %d%s; "
                 "closing that connection. Use a poll or epoll model for more clients.", fd, ev_name(),
                 ev_limit(l->ev), ev_limit(l->ev) == FD_SETSIZE ? " (glibc's FD_SETSIZE)" : "");
        else if (err == ENOSPC)
            warn("%s cannot watch descriptor %d: the per-user limit on watched descriptors is reached "
                 "(fs.epoll.max_user_watches); closing that connection", ev_name(), fd);
        else
            warn("%s cannot watch descriptor %d (%s); closing that connection", ev_name(), fd, strerror(err));
    }
    close(fd);
}

/* Accept up to ACCEPTS_PER_WAKEUP clients; true if more may be waiting.
 * `woken`: the backend just said the listener is ready (for the counters). */
static bool accept_clients(struct loop *l, bool woken)
{
    for (int i = 0; i < ACCEPTS_PER_WAKEUP; i++) {
        int fd = server_accept(l->cfg->listen_fd, true);
        if (fd < 0) {
            if (errno == EAGAIN) {
                if (i == 0 && woken) /* told "ready", found nothing: another process took it */
                    atomic_fetch_add_explicit(&server_counters.futile_accepts, 1, memory_order_relaxed);
                return false;
            }
            continue; /* shed or aborted: next one */
        }
        /* Check before ev_add: a backend must never be handed an fd it cannot hold. */
        if (fd >= l->setsize || fd >= ev_limit(l->ev)) {
            refuse(l, fd, 0);
            continue;
        }
        if (ev_add(l->ev, fd, EV_READABLE) < 0) { /* epoll: ENOMEM, ENOSPC (max_user_watches) */
            refuse(l, fd, errno);
            continue;
        }
        l->conns[fd] = (struct conn){ .session = session_new(l->cfg->service), .mask = EV_READABLE,
                                      .last_active_ns = l->idle_ns ? now_ns() : 0 };
        l->nconns++;
        if (fd >= l->fd_end)
            l->fd_end = fd + 1;
        /* edge: watch both directions once and for all; only edges will come */
        if (l->edge)
            watch(l, fd, EV_READABLE | EV_WRITABLE);
        if (l->conns[fd].session == NULL) {
            warn("out of memory: closing a connection");
            close_conn(l, fd);
        }
    }
    return true;
}

/* Bytes moved on fd: it is not idle. */
static void moved_now(struct loop *l, int fd)
{
    if (l->idle_ns)
        l->conns[fd].last_active_ns = now_ns();
}

/* Do what fd is ready for, then decide what to wait for next. */
static void serve_client(struct loop *l, int fd, int ready)
{
    session_t *s = l->conns[fd].session;
    size_t len;
    if (s == NULL)
        return; /* closed earlier in this round */

    if (ready & EV_READABLE) {
        char *in = session_read_buf(s, &len);
        if (len > 0) {
            ssize_t got = read_some(fd, in, len);
            if (got > 0)
                session_did_read(s, (size_t)got);
            else if (got == 0)
                session_did_eof(s);
            else if (errno != EAGAIN) {
                close_conn(l, fd); /* reset: this client only */
                return;
            }
            if (got >= 0)
                moved_now(l, fd);
        }
    }
    /* Write now rather than wait a round: the socket usually has room.  One
     * write per wakeup: a drained reply lets the session answer its next
     * pipelined request, and looping here would let one client that piles
     * up requests hold the whole server while the kernel buffers fill. */
    const char *out = session_write_buf(s, &len);
    if (len > 0) {
        ssize_t put = write_some(fd, out, len);
        if (put >= 0) {
            session_did_write(s, (size_t)put);
            moved_now(l, fd);
        } else if (errno != EAGAIN) {
            close_conn(l, fd);
            return;
        }
    }
    if (session_done(s)) {
        close_conn(l, fd);
        return;
    }
    session_read_buf(s, &len);
    watch(l, fd, (len > 0 ? EV_READABLE : 0) | (session_out_pending(s) > 0 ? EV_WRITABLE : 0));
}

/* edge: the backend reports a socket when something new happens to it (more
 * data, more room), not while it stays ready.  So remember the readiness, and
 * use it up: read and write until the kernel says EAGAIN, because bytes left
 * unread now are reported again only when the client sends more, and a client
 * waiting for its reply never will.  Reading stops early only when the session's
 * input is full; `can_read` remembers that more is waiting.  A budget per
 * turn keeps one busy client from holding the loop: a client with work left
 * goes on the `again` list, served next round without waiting for an edge. */
static void serve_client_edge(struct loop *l, int fd, int ready)
{
    struct conn *c = &l->conns[fd];
    session_t *s = c->session;
    size_t len;
    if (s == NULL)
        return;
    c->can_read |= (ready & EV_READABLE) != 0;
    c->can_write |= (ready & EV_WRITABLE) != 0;

    for (int turn = 0; turn < TRANSFERS_PER_TURN; turn++) {
        bool moved = false;
        char *in = session_read_buf(s, &len);
        if (c->can_read && len > 0) {
            ssize_t got = read_some(fd, in, len);
            if (got > 0) {
                session_did_read(s, (size_t)got);
                moved = true;
            } else if (got == 0) {
                session_did_eof(s);
                c->can_read = false; /* nothing more will come */
                moved = true;
            } else if (errno == EAGAIN) {
                c->can_read = false; /* drained: the next edge will tell */
            } else {
                close_conn(l, fd);
                return;
            }
        }
        const char *out = session_write_buf(s, &len);
        if (c->can_write && len > 0) {
            ssize_t put = write_some(fd, out, len);
            if (put > 0) {
                session_did_write(s, (size_t)put);
                moved = true;
            } else if (put < 0 && errno == EAGAIN) {
                c->can_write = false; /* the socket is full: wait for its edge */
            } else if (put < 0) {
                close_conn(l, fd);
                return;
            }
        }
        if (session_done(s)) {
            close_conn(l, fd);
            return;
        }
        if (!moved)
            return; /* nothing to do until the next edge */
        moved_now(l, fd);
    }
    if (!c->queued && l->nagain < l->setsize) {
        c->queued = true;
        l->again[l->nagain++] = fd;
    }
}

/* edge: give every client that had work left its next turn. */
static void serve_again(struct loop *l, int *turns)
{
    int n = l->nagain;
    memcpy(turns, l->again, (size_t)n * sizeof *turns);
    l->nagain = 0;
    for (int i = 0; i < n; i++) {
        if (!l->conns[turns[i]].queued)
            continue; /* closed since, and maybe reused */
        l->conns[turns[i]].queued = false;
        serve_client_edge(l, turns[i], 0);
    }
}

static int setsize_from_fd_limit(void)
{
    struct rlimit lim;
    if (getrlimit(RLIMIT_NOFILE, &lim) < 0 || lim.rlim_cur > MAX_SETSIZE)
        return MAX_SETSIZE;
    return (int)lim.rlim_cur;
}

int loop_serve(const struct server_config *cfg)
{
    int stop_fd = server_stop_fd();
    struct loop l = { .cfg = cfg, .setsize = setsize_from_fd_limit(), .edge = ev_edge_triggered(),
                      .idle_ns = (uint64_t)(cfg->idle_timeout * 1e9) };
    l.ev = ev_create(l.setsize);
    l.fired = calloc((size_t)l.setsize, sizeof *l.fired);
    l.conns = calloc((size_t)l.setsize, sizeof *l.conns);
    l.again = calloc((size_t)l.setsize, sizeof *l.again);
    int *turns = calloc((size_t)l.setsize, sizeof *turns);
    if (l.ev == NULL || l.fired == NULL || l.conns == NULL || l.again == NULL || turns == NULL)
        die("out of memory for %d descriptors", l.setsize);
    /* Worker processes share this listener: have the kernel wake only one.
     * (epoll_reuseport's workers each have their own: nobody to exclude.) */
    int listen_mask = EV_READABLE | (cfg->workers > 0 && !cfg->own_listeners ? EV_EXCLUSIVE : 0);
    if (net_set_nonblocking(cfg->listen_fd, true) < 0 ||
        ev_add(l.ev, cfg->listen_fd, listen_mask) < 0 || ev_add(l.ev, stop_fd, EV_READABLE) < 0)
        die_errno("%s cannot watch the listening socket", ev_name());

    for (bool stopping = false; !stopping;) {
        bool work_left = l.accept_again || l.nagain > 0; /* edge only */
        int n = ev_poll(l.ev, work_left ? 0 : poll_timeout_ms(&l, l.idle_ns ? now_ns() : 0), l.fired);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            die_errno("%s", ev_name());
        }
        bool woken = false;
        for (int i = 0; i < n; i++) {
            int fd = l.fired[i].fd;
            if (fd == stop_fd)
                stopping = true;
            else if (fd == cfg->listen_fd) {
                l.accept_again = woken = true;
                atomic_fetch_add_explicit(&server_counters.listener_wakeups, 1, memory_order_relaxed);
            }
            else if (l.edge)
                serve_client_edge(&l, fd, l.fired[i].mask);
            else
                serve_client(&l, fd, l.fired[i].mask);
        }
        /* Level: the listener stays ready while clients wait, so it is
         * reported again.  Edge: it is not; remember to come back. */
        if (l.accept_again)
            l.accept_again = accept_clients(&l, woken) && l.edge;
        serve_again(&l, turns);
        if (l.idle_ns) {
            uint64_t now = now_ns();
            if (now >= l.next_sweep_ns) {
                shed_idle(&l, now);
                l.next_sweep_ns = now + l.idle_ns / SWEEPS_PER_TIMEOUT;
            }
        }
    }

    for (int fd = 0; fd < l.setsize; fd++)
        if (l.conns[fd].session != NULL)
            close_conn(&l, fd);
    ev_free(l.ev);
    free(l.fired);
    free(l.conns);
    free(l.again);
    free(turns);
    close(cfg->listen_fd);
    server_report_counters();
    return 0;
}
