/* fork.c -- a process per connection: the parent accepts and forks; the
 * child serves that one connection with the blocking session and exits.
 * The parent reaps each ended child when SIGCHLD says so (an unreaped
 * child stays a zombie, holding its slot in the process table), and on
 * SIGTERM forwards the signal to every child and reaps them all.
 *
 * No --workers: like threaded.c this model makes one process per client,
 * bounded only by the system (RLIMIT_NPROC, memory).  When fork() fails,
 * that connection is closed with a warning and the server goes on; for a
 * fixed number of processes, see prefork.c.  It prints no counters line:
 * each connection's process would have its own. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/blocking.h"
#include "common/children.h"
#include "common/net.h"
#include "common/server_main.h"
#include "common/util.h"

#define ACCEPTS_PER_WAKEUP 64
#define STOP_TIMEOUT_MS 800

static void child_ended(pid_t pid, int status, void *arg)
{
    (void)arg;
    if (status != 0) { /* a connection's end is normal; a crash is worth saying */
        char how[128];
        warn("connection process %d %s", (int)pid, children_describe(status, how, sizeof how));
    }
}

static void accept_clients(const struct server_config *cfg, struct children *children)
{
    for (int i = 0; i < ACCEPTS_PER_WAKEUP; i++) {
        int fd = server_accept(cfg->listen_fd, false); /* the client's socket: blocking */
        if (fd < 0) {
            if (errno == EAGAIN)
                return;
            continue;
        }
        pid_t pid = children_fork(children);
        if (pid == 0) { /* the child: this one connection, then exit */
            close(cfg->listen_fd);
            serve_blocking(fd, cfg->service, cfg->idle_timeout);
            exit(0);
        }
        if (pid < 0)
            warn_errno("cannot fork: closing a connection");
        close(fd); /* the child has its own copy */
    }
}

static int serve(const struct server_config *cfg)
{
    struct children *children = children_new();
    if (children == NULL)
        die_errno("cannot watch for children ending");
    if (net_set_nonblocking(cfg->listen_fd, true) < 0)
        die_errno("cannot make the listener non-blocking");
    struct pollfd watched[] = {
        { .fd = server_stop_fd(), .events = POLLIN },
        { .fd = children_fd(children), .events = POLLIN },
        { .fd = cfg->listen_fd, .events = POLLIN },
    };
    while (watched[0].revents == 0) {
        if (poll(watched, 3, -1) < 0) {
            if (errno == EINTR)
                continue;
            die_errno("poll");
        }
        if (watched[1].revents)
            children_reap(children, child_ended, NULL);
        if (watched[2].revents)
            accept_clients(cfg, children);
    }
    int killed = children_stop(children, STOP_TIMEOUT_MS);
    if (killed > 0)
        warn("%d connection process(es) ignored SIGTERM and were killed", killed);
    children_free(children);
    close(cfg->listen_fd);
    return 0;
}

int main(int argc, char **argv)
{
    static const struct server_model model = {
        .name = "fork",
        .summary = "Serves each connection in its own forked process.",
        .serves_in_children = true,
        .has_idle_timeout = true,
        .serve = serve,
    };
    return server_main(argc, argv, &model);
}
