/* uring.c -- one thread serves every connection through io_uring: instead
 * of asking which sockets are ready and then calling read/write (select,
 * poll, epoll), it submits the operations themselves -- accept, recv,
 * send -- to a ring shared with the kernel, and collects their results
 * from a completion ring.  One submission and one wait can cover many
 * connections' I/O, with no readiness step in between.
 *
 * Each connection has at most one recv and one send in flight; a finished
 * operation leads to the next (advance()).  A connection is closed only
 * when none is in flight, so no completion can arrive for a closed (and
 * maybe reused) descriptor.  Needs liburing (the Makefile skips this model
 * without it) and a kernel that allows io_uring (some containers and
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
#define MAX_SETSIZE (1 << 20)

/* What a completion is for: user_data = descriptor << 2 | operation. */
enum op { OP_ACCEPT, OP_RECV, OP_SEND, OP_STOP };

struct conn {
    session_t *session; /* NULL: no connection on this descriptor */
    bool receiving, sending; /* an operation in flight */
    bool eof, broken, shut;
};

struct server {
    struct io_uring ring;
    struct conn *conns; /* indexed by descriptor */
    int setsize;
    const struct server_config *cfg;
};

/* A submission slot; when the ring is full, hand the queued ones to the kernel first. */
static struct io_uring_sqe *next_sqe(struct server *sv)
{
    struct io_uring_sqe *sqe;
    while ((sqe = io_uring_get_sqe(&sv->ring)) == NULL)
        io_uring_submit(&sv->ring);
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
    char *in = session_read_buf(c->session, &len);
    if (!c->receiving && !c->eof && len > 0) { /* len 0: output full, read no more for now */
        struct io_uring_sqe *sqe = next_sqe(sv);
        io_uring_prep_recv(sqe, fd, in, len, 0);
        tag(sqe, fd, OP_RECV);
        c->receiving = true;
    }
}

static void accepted(struct server *sv, int fd)
{
    if (fd == -EMFILE || fd == -ENFILE) /* out of descriptors: shed with the spare's trick */
        fd = server_accept(sv->cfg->listen_fd, true);
    arm_accept(sv);
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
    advance(sv, fd);
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
    advance(sv, fd);
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
    int err = io_uring_queue_init(RING_ENTRIES, &sv.ring, 0);
    if (err < 0) {
        errno = -err;
        die_errno("io_uring is not available here (kernel.io_uring_disabled, or a container "
                  "that forbids it); use the epoll model instead");
    }
    sv.conns = calloc((size_t)sv.setsize, sizeof *sv.conns);
    if (sv.conns == NULL)
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

    for (bool stopping = false; !stopping;) {
        struct io_uring_cqe *cqe;
        int got = io_uring_submit_and_wait(&sv.ring, 1);
        if (got < 0 && got != -EINTR) {
            errno = -got;
            die_errno("io_uring_submit_and_wait");
        }
        unsigned head, seen = 0;
        io_uring_for_each_cqe(&sv.ring, head, cqe) {
            seen++;
            uint64_t data = io_uring_cqe_get_data64(cqe);
            int fd = (int)(data >> 2);
            enum op op = (enum op)(data & 3);
            if (op == OP_STOP)
                stopping = true;
            else if (op == OP_ACCEPT)
                accepted(&sv, cqe->res);
            else
                completed(&sv, fd, op, cqe->res);
        }
        io_uring_cq_advance(&sv.ring, seen);
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
