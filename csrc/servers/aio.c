/* aio.c -- POSIX asynchronous I/O polled: one thread hands each
 * connection's next read (or write) to aio_read() (aio_write()), then polls
 * every control block with aio_error() until it is no longer EINPROGRESS
 * and takes the result with aio_return().  Seed 002's "POSIX aio +
 * polling" (2b).
 *
 * What "asynchronous" means here: glibc implements POSIX AIO in user space.
 * A pool of threads (at most 20 by default, aio_init()) each takes a
 * request and does a plain blocking read() or write() for it; see them in
 * /proc/<pid>/task.  The kernel sees ordinary blocking calls: nothing is
 * asynchronous below glibc (Linux's own asynchronous interface for sockets
 * is io_uring, uring.c).  So every request costs a hand-off to a pool
 * thread and a wake-up, aio_error() itself is only a look at memory (this
 * loop spins on a whole CPU), and a client that sends nothing holds a pool
 * thread in read() until it speaks: 20 silent clients stall this server. */
#include <aio.h>
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/net.h"
#include "common/server_main.h"
#include "common/util.h"

struct conn {
    int fd;
    session_t *session;
    struct aiocb cb;  /* must not move while a request is in flight */
    bool in_flight;
    bool writing;     /* the request in flight is a write */
};

static struct conn **conns;
static size_t nconns, cap;

/* Hand the session's next transfer to the pool: its output if it has some,
 * else a read.  false: the session is done, close it. */
static bool submit(struct conn *c)
{
    size_t len;
    const char *out = session_write_buf(c->session, &len);
    c->writing = len > 0;
    if (!c->writing) {
        if (session_done(c->session))
            return false;
        out = session_read_buf(c->session, &len);
        if (len == 0)
            return false; /* cannot happen with the output drained; never spin */
    }
    c->cb = (struct aiocb){ .aio_fildes = c->fd, .aio_buf = (void *)out, .aio_nbytes = len };
    int r = c->writing ? aio_write(&c->cb) : aio_read(&c->cb);
    c->in_flight = r == 0; /* EAGAIN: out of resources; try again next round */
    return r == 0 || errno == EAGAIN;
}

/* Poll one connection; false: close it. */
static bool poll_conn(struct conn *c)
{
    if (!c->in_flight)
        return submit(c);
    int err = aio_error(&c->cb);
    if (err == EINPROGRESS)
        return true;
    ssize_t n = aio_return(&c->cb);
    c->in_flight = false;
    if (err != 0 || n < 0)
        return false; /* reset or EPIPE: this client only */
    if (c->writing)
        session_did_write(c->session, (size_t)n);
    else if (n == 0)
        session_did_eof(c->session);
    else
        session_did_read(c->session, (size_t)n);
    return submit(c);
}

static void add_conn(int fd, const service_t *svc)
{
    if (nconns == cap) {
        struct conn **grown = realloc(conns, (cap ? 2 * cap : 64) * sizeof *conns);
        if (grown != NULL) {
            conns = grown;
            cap = cap ? 2 * cap : 64;
        }
    }
    struct conn *c = nconns < cap ? calloc(1, sizeof *c) : NULL;
    if (c == NULL || (c->session = session_new(svc)) == NULL) {
        warn("out of memory: closing a connection");
        free(c);
        close(fd);
        return;
    }
    c->fd = fd;
    conns[nconns++] = c;
}

static int serve(const struct server_config *cfg)
{
    if (net_set_nonblocking(cfg->listen_fd, true) < 0)
        die_errno("make the listener non-blocking");
    for (;;) {
        int fd;
        /* Blocking client sockets: a pool thread's read() waits for data. */
        while ((fd = server_accept(cfg->listen_fd, false)) >= 0 || errno != EAGAIN)
            if (fd >= 0)
                add_conn(fd, cfg->service);
        for (size_t i = 0; i < nconns;) {
            struct conn *c = conns[i];
            if (poll_conn(c)) {
                i++;
                continue;
            }
            session_free(c->session);
            close(c->fd);
            free(c);
            conns[i] = conns[--nconns];
        }
    }
    return 0; /* not reached: SIGTERM ends the process */
}

int main(int argc, char **argv)
{
    static const struct server_model model = {
        .name = "aio",
        .summary = "Serves every connection from one thread through POSIX aio_read/aio_write, "
                   "polling each request with aio_error (glibc runs them on a thread pool).",
        .serve = serve,
    };
    return server_main(argc, argv, &model);
}
