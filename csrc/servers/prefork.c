/* prefork.c -- N processes forked in advance, each blocking in accept() on
 * the shared listener and serving its connection to the end, like the
 * iterative server (Apache's prefork).  N processes serve N clients at a
 * time; the others wait in the listen queue until a process is free.
 *
 * Counters: each worker reports its line (server_main.h) when SIGTERM
 * ends it, from the signal handler: one write(2), then _exit -- it may be
 * blocked in accept() or in a client's read(), and either way nothing is
 * left to save.  futile_accepts is 0 by construction: a blocking accept()
 * sleeps as an exclusive waiter (the kernel wakes one sleeper per
 * connection), and a sleeper that wakes to find the connection taken by a
 * process that was not asleep goes back to sleep inside the kernel;
 * accept() returns to us only with a connection (or an error): see
 * inet_csk_wait_for_connect() in Linux's net/ipv4/inet_connection_sock.c.
 * There each accept() queues its sleeper at the TAIL anew
 * (prepare_to_wait_exclusive), so sleeping workers take connections in
 * turn -- unlike epoll_workers, whose EPOLLEXCLUSIVE entries keep the order
 * they were registered in.  listener_wakeups counts accept()'s returns. */
#include <stdatomic.h>

#include "common/blocking.h"
#include "common/server_main.h"
#include "common/workers.h"

static int accept_and_serve(const struct server_config *cfg)
{
    server_report_counters_on_stop();
    for (;;) { /* SIGTERM ends the worker (server_after_fork), reporting first */
        int fd = server_accept(cfg->listen_fd, false);
        atomic_fetch_add(&server_counters.listener_wakeups, 1);
        if (fd >= 0)
            serve_blocking(fd, cfg->service, cfg->idle_timeout);
    }
    return 0;
}

static int serve(const struct server_config *cfg)
{
    return serve_with_workers(cfg, accept_and_serve);
}

int main(int argc, char **argv)
{
    static const struct server_model model = {
        .name = "prefork",
        .summary = "N pre-forked processes, each accepting and serving one connection at a time.",
        .has_workers = true,
        .serves_in_children = true,
        .has_idle_timeout = true,
        .serve = serve,
    };
    return server_main(argc, argv, &model);
}
