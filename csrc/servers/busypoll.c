/* busypoll.c -- one thread, non-blocking sockets, and no waiting at all: it
 * tries every socket in turn, round after round, and a read that finds
 * nothing says EAGAIN.  Seed 002's "non-blocking sockets + busy polling" (2a).
 *
 * Diff it against loop/loop.c: the same read and write steps, but where the
 * loop asks select() which sockets are ready and sleeps until one is, this
 * model asks every socket itself.  So it burns a whole CPU by design, even
 * when no client sends a byte, and each round costs one system call per
 * connection, ready or not.  With one busy connection that is the fastest
 * server here (no sleep, no wake-up); with 10,000 it spends nearly all its
 * time in reads that say EAGAIN. */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/net.h"
#include "common/server_main.h"
#include "common/util.h"

struct conn {
    int fd;
    session_t *session;
};

static struct conn *conns;
static size_t nconns, cap;

static void add_conn(int fd, const service_t *svc)
{
    if (nconns == cap) {
        struct conn *grown = realloc(conns, (cap ? 2 * cap : 64) * sizeof *conns);
        if (grown != NULL) {
            conns = grown;
            cap = cap ? 2 * cap : 64;
        }
    }
    session_t *s = nconns < cap ? session_new(svc) : NULL;
    if (s == NULL) {
        warn("out of memory: closing a connection");
        close(fd);
        return;
    }
    conns[nconns++] = (struct conn){ fd, s };
}

/* One read and one write, if the socket takes them now; false: close it. */
static bool poll_conn(struct conn *c)
{
    size_t len;
    char *in = session_read_buf(c->session, &len);
    if (len > 0) {
        ssize_t got = read_some(c->fd, in, len);
        if (got > 0)
            session_did_read(c->session, (size_t)got);
        else if (got == 0)
            session_did_eof(c->session);
        else if (errno != EAGAIN)
            return false; /* reset: this client only */
    }
    const char *out = session_write_buf(c->session, &len);
    if (len > 0) {
        ssize_t put = write_some(c->fd, out, len);
        if (put >= 0)
            session_did_write(c->session, (size_t)put);
        else if (errno != EAGAIN)
            return false;
    }
    return !session_done(c->session);
}

static int serve(const struct server_config *cfg)
{
    if (net_set_nonblocking(cfg->listen_fd, true) < 0)
        die_errno("make the listener non-blocking");
    for (;;) {
        int fd;
        while ((fd = server_accept(cfg->listen_fd, true)) >= 0 || errno != EAGAIN)
            if (fd >= 0)
                add_conn(fd, cfg->service);
        for (size_t i = 0; i < nconns;) {
            if (poll_conn(&conns[i])) {
                i++;
                continue;
            }
            session_free(conns[i].session);
            close(conns[i].fd);
            conns[i] = conns[--nconns]; /* the last one takes its place */
        }
    }
    return 0; /* not reached: SIGTERM ends the process */
}

int main(int argc, char **argv)
{
    static const struct server_model model = {
        .name = "busypoll",
        .summary = "Serves every connection from one thread that polls each non-blocking "
                   "socket in turn without ever waiting (it keeps one CPU busy).",
        .serve = serve,
    };
    return server_main(argc, argv, &model);
}
