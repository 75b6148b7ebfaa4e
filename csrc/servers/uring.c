/* uring.c -- one thread serves every connection through io_uring: instead
 * of asking which sockets are ready and then calling read/write (select,
 * poll, epoll), it submits the operations themselves -- accept, recv,
 * send -- to a ring shared with the kernel, and collects their results
 * from a completion ring.  One io_uring_enter() per loop turn submits what
 * the last turn queued and waits for completions (no SQPOLL thread: the
 * submission is a system call), and can cover many connections' I/O, with
 * no readiness step in between.
 *
 * Completion-based I/O changes who owns a buffer: a recv in flight is the
 * kernel's, filling the session's input buffer while the loop goes on.  So
 * each connection has at most one recv and one send in flight, a new recv
 * is asked for only after the last one completed, and the session keeps
 * that buffer where it is until the recv is reported (session.h), even
 * when a completed send lets it answer requests queued behind it.  A
 * connection is closed only when none is in flight, so no completion can
 * arrive for a closed (and maybe reused) descriptor.
 *
 * Each turn reaps every completion first and only then starts the next
 * operations: the completion ring is empty when new work is queued.  A
 * kernel with IORING_FEAT_NODROP holds the completions the ring had no room
 * for, and io_uring_enter(2) may then fail with EBUSY; it fails with
 * EAGAIN when the kernel is short of resources.  Whenever a submit fails
 * with either, the loop reaps and tries again; it never gives up.  Accept
 * is single-shot, re-armed once per connection (multishot accept, Linux
 * 5.19, would leave one armed).  Needs liburing (the Makefile skips this
 * model without it) and a kernel that allows io_uring (some containers and
 * hardened kernels do not: the server then says so and exits). */
#include <errno.h>
#include <liburing.h>
#include <limits.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/net.h"
#include "common/server_main.h"
#include "common/util.h"

#define RING_ENTRIES 256
#define CQ_ENTRIES 4096 /* completions one turn can collect before the kernel must hold them back */
#define MAX_SETSIZE (1 << 20)

/* What a completion is for: user_data = descriptor << 2 | operation. */
enum op { OP_ACCEPT, OP_RECV, OP_SEND, OP_STOP };

struct conn {
    session_t *session; /* NULL: no connection on this descriptor */
    bool receiving, sending; /* an operation in flight */
    bool eof, broken, shut;
    bool touched; /* completed this turn: advance() it once the turn's completions are reaped */
};

struct server {
    struct io_uring ring;
    struct conn *conns; /* indexed by descriptor */
    int setsize;
    int *touched, ntouched; /* the descriptors to advance this turn */
    bool accept_armed, stopping;
    const struct server_config *cfg;
};

static void reap(struct server *sv);

/* A submission slot; when the ring is full, hand the queued ones to the kernel first. */
static struct io_uring_sqe *next_sqe(struct server *sv)
{
    struct io_uring_sqe *sqe;
    while ((sqe = io_uring_get_sqe(&sv->ring)) == NULL) {
        int r = io_uring_submit(&sv->ring);
        if (r == -EBUSY || r == -EAGAIN) /* as in serve()'s loop: reap, then submit again */
            reap(sv);
    }
    return sqe;
}

static void tag(struct io_uring_sqe *sqe, int fd, enum op op)
{
    io_uring_sqe_set_data64(sqe, (uint64_t)fd << 2 | op);
}

static void arm_accept(struct server *sv)
{
    struct io_uring_sqe *sqe = next_sqe(sv);
    io_uring_prep_accept(sqe, sv->cfg->listen_fd, NULL, NULL, SOCK_CLOEXEC);
    tag(sqe, sv->cfg->listen_fd, OP_ACCEPT);
    sv->accept_armed = true;
}

/* fd needs advance() at the end of this turn (once, however many of its operations completed). */
static void touch(struct server *sv, int fd)
{
    if (!sv->conns[fd].touched) {
        sv->conns[fd].touched = true;
        sv->touched[sv->ntouched++] = fd;
    }
}

static void close_conn(struct server *sv, int fd)
{
    session_free(sv->conns[fd].session);
    sv->conns[fd] = (struct conn){ 0 };
    close(fd);
}

/* After any completion for fd: start what can start, or close. */
static void advance(struct server *sv, int fd)
{
    struct conn *c = &sv->conns[fd];
    size_t len;
    if (c->broken || session_done(c->session)) {
        if (!c->receiving && !c->sending) {
            close_conn(sv, fd);
        } else if (!c->shut) { /* end the operations in flight: they complete at once */
            shutdown(fd, SHUT_RDWR);
            c->shut = true;
        }
        return;
    }
    const char *out = session_write_buf(c->session, &len);
    if (!c->sending && len > 0) {
        struct io_uring_sqe *sqe = next_sqe(sv);
        io_uring_prep_send(sqe, fd, out, len, MSG_NOSIGNAL);
        tag(sqe, fd, OP_SEND);
        c->sending = true;
    }
    if (c->receiving || c->eof)
        return; /* the recv in flight owns the input buffer: ask for none until it completes */
    char *in = session_read_buf(c->session, &len);
    if (len > 0) { /* len 0: output full, read no more for now */
        struct io_uring_sqe *sqe = next_sqe(sv);
        io_uring_prep_recv(sqe, fd, in, len, 0);
        tag(sqe, fd, OP_RECV);
        c->receiving = true;
    }
}

static void accepted(struct server *sv, int fd)
{
    sv->accept_armed = false; /* re-armed at the end of the turn */
    if (fd == -EMFILE || fd == -ENFILE) /* out of descriptors: shed with the spare's trick */
        fd = server_accept(sv->cfg->listen_fd, true);
    if (fd < 0)
        return; /* shed, aborted, or nothing left to take */
    if (fd >= sv->setsize) {
        close(fd);
        return;
    }
    sv->conns[fd] = (struct conn){ .session = session_new(sv->cfg->service) };
    if (sv->conns[fd].session == NULL) {
        warn("out of memory: closing a connection");
        close(fd);
        return;
    }
    touch(sv, fd);
}

static void completed(struct server *sv, int fd, enum op op, int res)
{
    struct conn *c = &sv->conns[fd];
    if (op == OP_RECV) {
        c->receiving = false;
        if (res > 0)
            session_did_read(c->session, (size_t)res);
        else if (res == 0) {
            session_did_eof(c->session);
            c->eof = true;
        } else if (res != -EINTR && res != -EAGAIN)
            c->broken = true; /* reset: this client only */
    } else {
        c->sending = false;
        if (res >= 0)
            session_did_write(c->session, (size_t)res);
        else if (res != -EINTR && res != -EAGAIN)
            c->broken = true;
    }
    touch(sv, fd);
}

/* Take every completion waiting: record what it did, mark its connection for advance(). */
static void reap(struct server *sv)
{
    struct io_uring_cqe *cqe;
    unsigned head, seen = 0;
    io_uring_for_each_cqe(&sv->ring, head, cqe) {
        seen++;
        uint64_t data = io_uring_cqe_get_data64(cqe);
        enum op op = (enum op)(data & 3);
        if (op == OP_STOP)
            sv->stopping = true;
        else if (op == OP_ACCEPT)
            accepted(sv, cqe->res);
        else
            completed(sv, (int)(data >> 2), op, cqe->res);
    }
    io_uring_cq_advance(&sv->ring, seen);
}

static int setsize_from_fd_limit(void)
{
    struct rlimit lim;
    if (getrlimit(RLIMIT_NOFILE, &lim) < 0 || lim.rlim_cur > MAX_SETSIZE)
        return MAX_SETSIZE;
    return (int)lim.rlim_cur;
}

static int serve(const struct server_config *cfg)
{
    struct server sv = { .cfg = cfg, .setsize = setsize_from_fd_limit() };
    struct io_uring_params params = { .flags = IORING_SETUP_CQSIZE, .cq_entries = CQ_ENTRIES };
    int err = io_uring_queue_init_params(RING_ENTRIES, &sv.ring, &params);
    if (err < 0) {
        errno = -err;
        die_errno("io_uring is not available here (kernel.io_uring_disabled, or a container "
                  "that forbids it); use the epoll model instead");
    }
    sv.conns = calloc((size_t)sv.setsize, sizeof *sv.conns);
    sv.touched = calloc((size_t)sv.setsize, sizeof *sv.touched);
    if (sv.conns == NULL || sv.touched == NULL)
        die("out of memory for %d descriptors", sv.setsize);
    /* Non-blocking, so the EMFILE path (server_accept) never waits; io_uring
     * itself waits for a connection either way. */
    if (net_set_nonblocking(cfg->listen_fd, true) < 0)
        die_errno("cannot make the listener non-blocking");
    int stop_fd = server_stop_fd();
    struct io_uring_sqe *sqe = next_sqe(&sv);
    io_uring_prep_poll_add(sqe, stop_fd, POLLIN);
    tag(sqe, stop_fd, OP_STOP);
    arm_accept(&sv);

    while (!sv.stopping) {
        int got = io_uring_submit_and_wait(&sv.ring, 1);
        /* EBUSY (completions held back) or EAGAIN (no resources just now): reap, then again */
        if (got < 0 && got != -EINTR && got != -EBUSY && got != -EAGAIN) {
            errno = -got;
            die_errno("io_uring_submit_and_wait");
        }
        reap(&sv);
        /* every completion of the turn is in: now start what follows them */
        for (int i = 0; i < sv.ntouched; i++) {
            int fd = sv.touched[i];
            sv.conns[fd].touched = false;
            if (sv.conns[fd].session != NULL)
                advance(&sv, fd);
        }
        sv.ntouched = 0;
        if (!sv.accept_armed && !sv.stopping)
            arm_accept(&sv);
    }

    /* The accept in flight holds the listener, and the kernel tears a ring
     * down after we exit: unhash the listener now so its port is free the
     * moment we are gone. */
    shutdown(cfg->listen_fd, SHUT_RDWR);
    io_uring_queue_exit(&sv.ring); /* cancels what is in flight */
    for (int fd = 0; fd < sv.setsize; fd++)
        if (sv.conns[fd].session != NULL)
            close_conn(&sv, fd);
    free(sv.conns);
    free(sv.touched);
    close(cfg->listen_fd);
    return 0;
}

int main(int argc, char **argv)
{
    static const struct server_model model = {
        .name = "uring",
        .summary = "Serves every connection from one thread, submitting accept/recv/send to io_uring.",
        .serve = serve,
    };
    return server_main(argc, argv, &model);
}
