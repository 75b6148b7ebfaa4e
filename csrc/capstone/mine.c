/* mine.c -- your own server model (the capstone).  labkit copied this file
 * to csrc/servers/mine.c; `make` builds it into build/bin/mine like any model.
 *
 * What server_main() does before it calls your serve(cfg):
 *  - parses --port N (0: any free port), --host H, --service top|echo|sink,
 *    --backlog N and --workers N (this model has workers: without the flag,
 *    one per usable CPU); --idle-timeout S > 0 is refused (has_idle_timeout
 *    is false); --expect N works by itself: sessions count themselves;
 *  - ignores SIGPIPE (a write to a closed peer fails with EPIPE instead of
 *    killing you), raises the open-file limit to its hard limit, listens, and
 *    prints "listening <port>" on stdout;
 *  - makes SIGTERM and SIGINT end the process with status 0 at once (the
 *    kernel closes every socket), unless you ask for server_stop_fd(): then
 *    that descriptor becomes readable and serve() must return by itself.
 * serve(cfg) gets cfg->listen_fd (a BLOCKING listening socket), cfg->service
 * (for session_new) and cfg->workers; its return value is the exit status.
 *
 * The session (services/session.h) speaks the protocol; you only move bytes.
 * For each connection, again and again:
 *  - write what session_write_buf() offers, and report exactly what write()
 *    wrote with session_did_write() -- which may be fewer bytes than offered;
 *  - close (and session_free) once session_done() says so; with epoll, take
 *    the descriptor out of the set (EPOLL_CTL_DEL) before close(): close()
 *    alone removes it only once no other descriptor refers to the socket
 *    (epoll(7)), and a tool reading /proc/PID/fd holds one for a moment;
 *  - read into session_read_buf() unless its length is 0: then stop reading
 *    this client until its output drains (the client does not read its
 *    replies); report session_did_read(n), or session_did_eof() when read()
 *    returns 0.  After EOF the length stays 0: read no more.
 * On a non-blocking socket write() may take part of the bytes, or none
 * (EAGAIN: the send buffer is full, the client reads slower than you
 * write): the rest stays in the session; write it when the socket has room.  read() says EAGAIN when nothing is there yet.  Any other
 * error (ECONNRESET, EPIPE) ends that connection only, never the server.
 *
 * Accept with server_accept(listen_fd, nonblocking): when the process runs
 * out of descriptors (EMFILE) it sheds the waiting connection instead of
 * leaving the listener ready for ever; -1 means "try again" (EAGAIN: nothing
 * waiting, on a non-blocking listener).  An io_uring accept that completes
 * with -EMFILE has left the connection queued, and a multishot accept has
 * ended (no IORING_CQE_F_MORE): submitting it again at once fails again at
 * once, a spin.  Shed first with server_accept(listen_fd, true) on a
 * non-blocking listener, then submit the accept again, as uring.c does.  It counts server_counters.accepted;
 * count listener_wakeups yourself (threaded.c: each return of a blocking
 * accept).  Call server_report_counters_on_stop() once, and SIGTERM prints
 * them before the process ends.
 *
 * The battery of tests runs on your model as on the lab's: every service's
 * protocol, pipelined requests, requests split across packets, a slow reader
 * (no byte may be lost), clients that reset, many clients at once, running
 * out of descriptors, SIGTERM (status 0 within a second), what your server
 * uses (next to no CPU while its clients are silent; its descriptors and
 * memory back where they were after connections come and go, through every
 * kind of close), and the protocol, pipelining, split, reset and come-and-go
 * cases again in the ASan+UBSan build (make SAN=1).
 *
 * Designs to choose from (notebooks/07_your_server.ipynb walks through them):
 *  (a) threads plus epoll: one acceptor thread, N event-loop threads, each
 *      with its own epoll instance (the reference solution);
 *  (b) SO_REUSEPORT epoll workers: N processes, each with its own listener
 *      (see epoll_reuseport.c; set .own_listeners and use workers.h, linked in);
 *  (c) io_uring with multishot accept (Linux 5.19), multishot recv (6.0)
 *      and a ring of provided buffers (5.19) (liburing: -luring is linked
 *      when the machine has liburing; see uring.c).  io_uring may be
 *      refused: kernel.io_uring_disabled (6.6 and later) at 2, or at 1 to a
 *      process without CAP_SYS_ADMIN outside kernel.io_uring_group (-1 by
 *      default: no group), or a container's seccomp profile (Docker 25.0
 *      and later, containerd 2.0).
 *      A multishot recv goes on taking bytes while session_read_buf()
 *      offers 0, so the session's back-pressure is lost: keep what you hold,
 *      and cancel or stop re-arming that recv until the session has room,
 *      or one client that never reads empties the shared buffer ring and
 *      the other recvs end with -ENOBUFS (re-arm every recv that ended);
 *  (d) a thread pool with a bounded queue and back-pressure: when the queue
 *      is full, stop accepting and let the kernel's backlog hold the rest
 *      (pool.c is one; the notebook asks what yours does better).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "common/net.h"
#include "common/server_main.h"
#include "common/util.h"

/* ✏️ Your server goes here: serve(cfg), and everything it needs. */
/* BEGIN SOLUTION */
/* STUB: static int serve(const struct server_config *cfg)
{
    (void)cfg;
    fputs("mine: serve() is not written yet: write your server in csrc/servers/mine.c "
          "(notebook 07 shows the designs)\n", stderr);
    return 2;
}
*/
/* Threads plus epoll.  The main thread only accepts (a blocking accept, as
 * threaded.c), and hands each connection to one of N event-loop threads in
 * turn.  Each worker has its own epoll instance and serves its connections
 * alone: no lock of ours, and once handed over a connection stays put.
 * Round-robin ignores load, but with many connections it evens out.
 *
 * Level-triggered: epoll reports a socket for as long as it stays readable
 * (or writable), so a turn may leave work behind -- it will be reported
 * again.  We watch EPOLLIN only while the session takes input, and EPOLLOUT
 * only while output waits; watching EPOLLOUT always would wake us for ever. */

/* Small stacks: a worker's state is on the heap, its stack only holds the
 * event array. */
#define THREAD_STACK (256 * 1024)
#define MAX_EVENTS 64        /* events taken by one epoll_wait */
#define READS_PER_TURN 4     /* then the next client's turn: level-triggered reports the rest */

struct conn {
    int fd;              /* non-blocking */
    session_t *session;
    uint32_t events;     /* what this worker's epoll watches for it */
};

struct worker {
    int epfd;
};

static const service_t *service;

/* Out of the worker's epoll set first, then closed.  close() alone takes a
 * socket out of an epoll set only when it drops the last reference to the
 * socket (epoll(7), Q6), and another process may hold one: for a moment
 * while it reads /proc/PID/fd (ss -p, lsof, psutil), or for good
 * (pidfd_getfd).  Left in the set, a socket at EOF or reset stays ready, and
 * the next epoll_wait reports it again with c already freed.  w is NULL for
 * a conn no worker has watched. */
static void close_conn(struct worker *w, struct conn *c)
{
    if (w != NULL)
        epoll_ctl(w->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    session_free(c->session);
    free(c);
}

/* Write what the session has to say until it is all written or the socket
 * is full (EAGAIN: epoll will say when it has room again).  write() may take
 * only part of the bytes: report exactly what it took, the rest stays in the
 * session for next time.  False: the connection is broken (a reset). */
static bool flush_output(struct conn *c)
{
    for (;;) {
        size_t len;
        const char *out = session_write_buf(c->session, &len);
        if (len == 0)
            return true; /* all written */
        ssize_t put = write_some(c->fd, out, len);
        if (put < 0)
            return errno == EAGAIN;
        if (put == 0)
            return true; /* not for a socket, but never loop on it */
        session_did_write(c->session, (size_t)put); /* may let queued requests answer: loop */
    }
}

/* Read while the session takes input, at most READS_PER_TURN times.  False:
 * the connection is broken.  EOF is not an error: the session finishes the
 * replies already due, then says it is done. */
static bool read_input(struct conn *c)
{
    for (int i = 0; i < READS_PER_TURN; i++) {
        size_t room;
        char *in = session_read_buf(c->session, &room);
        if (room == 0)
            return true; /* input full (output not drained), or after EOF */
        ssize_t got = read_some(c->fd, in, room);
        if (got > 0) {
            session_did_read(c->session, (size_t)got);
        } else if (got == 0) {
            session_did_eof(c->session);
            return true;
        } else {
            return errno == EAGAIN;
        }
    }
    return true;
}

/* Watch for what the session needs next; one epoll_ctl only when it changed.
 * No EPOLLIN after EOF: session_read_buf offers 0 then, and a socket at EOF
 * stays readable, which would wake us for ever. */
static bool watch(struct worker *w, struct conn *c)
{
    size_t room;
    session_read_buf(c->session, &room);
    uint32_t want = (room > 0 ? EPOLLIN : 0) | (session_out_pending(c->session) > 0 ? EPOLLOUT : 0);
    if (want == c->events)
        return true;
    struct epoll_event ev = { .events = want, .data.ptr = c };
    if (epoll_ctl(w->epfd, EPOLL_CTL_MOD, c->fd, &ev) < 0)
        return false;
    c->events = want;
    return true;
}

/* One turn for a connection epoll reported: write, read, write what the
 * reads answered, then decide what to wait for. */
static void serve_conn(struct worker *w, struct conn *c, uint32_t ready)
{
    /* EPOLLERR/EPOLLHUP (we never shut our side down): a reset, or the
     * connection is gone both ways.  Nothing we write can arrive. */
    if (ready & (EPOLLERR | EPOLLHUP)) {
        close_conn(w, c);
        return;
    }
    /* Output first: what the socket had no room for last time.  Then input,
     * and at once the replies it produced (the socket usually has room). */
    if (!flush_output(c) || session_done(c->session) ||
        !read_input(c) || !flush_output(c) || session_done(c->session) ||
        !watch(w, c))
        close_conn(w, c);
}

static void *worker_thread(void *arg)
{
    struct worker *w = arg;
    struct epoll_event events[MAX_EVENTS];
    for (;;) {
        int n = epoll_wait(w->epfd, events, MAX_EVENTS, -1);
        if (n < 0 && errno != EINTR)
            die_errno("epoll_wait");
        /* Each connection appears at most once in a batch, so closing one
         * never leaves a later event pointing at freed memory. */
        for (int i = 0; i < n; i++)
            serve_conn(w, events[i].data.ptr, events[i].events);
    }
    return NULL;
}

static struct worker *start_workers(int n)
{
    struct worker *workers = calloc((size_t)n, sizeof *workers);
    if (workers == NULL)
        die("out of memory for %d workers", n);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, THREAD_STACK);
    for (int i = 0; i < n; i++) {
        workers[i].epfd = epoll_create1(EPOLL_CLOEXEC);
        if (workers[i].epfd < 0)
            die_errno("epoll_create1");
        pthread_t tid;
        int err = pthread_create(&tid, &attr, worker_thread, &workers[i]);
        if (err != 0) {
            errno = err;
            die_errno("cannot start thread %d of %d", i + 1, n);
        }
    }
    pthread_attr_destroy(&attr);
    return workers;
}

/* A conn for a newly accepted fd, made non-blocking; NULL (fd closed) if
 * that fails. */
static struct conn *conn_new(int fd)
{
    struct conn *c = malloc(sizeof *c);
    session_t *s = session_new(service);
    if (c == NULL || s == NULL)
        warn("out of memory: closing a connection");
    else if (net_set_nonblocking(fd, true) < 0)
        warn_errno("cannot make a connection non-blocking: closing it");
    else {
        *c = (struct conn){ .fd = fd, .session = s, .events = EPOLLIN };
        return c;
    }
    session_free(s);
    free(c);
    close(fd);
    return NULL;
}

/* Give a new connection to worker w.  Why no lock is needed: everything in
 * the conn is written BEFORE epoll_ctl(ADD), and the worker can learn of the
 * conn only from epoll_wait, which can report it only after ADD made it
 * part of the set (epoll's own lock orders the two threads' memory).  After
 * a successful ADD this thread never touches the conn again: it is the
 * worker's, to serve and to free. */
static void hand_over(struct worker *w, int fd)
{
    struct conn *c = conn_new(fd);
    if (c == NULL)
        return;
    struct epoll_event ev = { .events = c->events, .data.ptr = c };
    if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) { /* ENOMEM, ENOSPC (max_user_watches) */
        warn_errno("epoll cannot watch a new connection: closing it");
        close_conn(NULL, c); /* the worker never saw it */
    }
}

static int serve(const struct server_config *cfg)
{
    service = cfg->service;
    server_report_counters_on_stop();
    struct worker *workers = start_workers(cfg->workers);

    for (int next = 0;; next = (next + 1) % cfg->workers) {
        int fd = server_accept(cfg->listen_fd, false);
        atomic_fetch_add(&server_counters.listener_wakeups, 1); /* a blocking accept returned */
        if (fd >= 0)
            hand_over(&workers[next], fd);
    }
    return 0; /* not reached: SIGTERM ends the process */
}
/* END SOLUTION */

int main(int argc, char **argv)
{
    static const struct server_model model = {
        .name = "mine",
        .summary = "My own server model (the capstone).",
        .has_workers = true,
        .serve = serve,
    };
    return server_main(argc, argv, &model);
}
