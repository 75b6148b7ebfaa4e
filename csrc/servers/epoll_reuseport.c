/* epoll_reuseport.c -- N worker processes, each running the epoll event
 * loop (loop.c + ev_epoll.c) on ITS OWN listening socket: every worker
 * binds the same address and port with SO_REUSEPORT and listens, and the
 * kernel hashes each new connection's addresses and ports to pick one of
 * the listeners.  No listener is shared, so nobody else can take a
 * connection from a worker's queue: each wakeup finds its connection
 * (futile_accepts stays 0), and accepts on different CPUs never contend
 * for one queue's lock.  Compare epoll_workers.c: ONE listener shared by
 * every worker, each waiting on it with EPOLLEXCLUSIVE.
 *
 * What it costs, against epoll_workers:
 *  - the hash ignores load: a busy worker gets its share of new
 *    connections even while an idle one could serve them at once;
 *  - a listener's queue dies with its worker: the connections the kernel
 *    had completed and queued on it, not yet accepted, are reset (unless
 *    net.ipv4.tcp_migrate_req, Linux 5.14+, is 1: then the kernel moves them to another
 *    listener of the group).  New connections hash over the listeners that
 *    remain, and the supervisor's replacement worker opens a new listener;
 *  - start-up needs a handshake (below).
 *
 * Start-up, --port 0 and readiness.  server_main (own_listeners) does not
 * listen: it binds one socket with SO_REUSEPORT and never listens on it.
 * That picks the port for --port 0, and holds it while workers come and go
 * (no other user can take it; a bound socket that does not listen is never
 * given connections).  Each worker binds its own socket to that port,
 * listens, closes its copy of the parent's, and says so on a pipe
 * (workers_ready() in workers.c); the parent prints "listening <port>"
 * only once all N have, so a client that connects right after that line
 * always finds every listener -- never ECONNREFUSED, never a listener
 * about to appear.  SIGTERM: the supervisor (workers.c) forwards it, each
 * worker's loop returns and reports its counters, the parent exits 0.
 */
#include "common/net.h"
#include "common/server_main.h"
#include "common/util.h"
#include "common/workers.h"
#include "loop/loop.h"

#include <unistd.h>

/* In a worker: open this worker's own listener, say it listens, serve. */
static int work(const struct server_config *cfg)
{
    struct server_config mine = *cfg;
    mine.listen_fd = net_listen_reuseport(cfg->host, cfg->port, cfg->backlog);
    if (mine.listen_fd < 0)
        die_errno("worker cannot listen on %s port %d with SO_REUSEPORT", cfg->host, cfg->port);
    close(cfg->listen_fd); /* the parent's: it only holds the port */
    workers_ready();
    return loop_serve(&mine);
}

static int serve(const struct server_config *cfg)
{
    return serve_with_workers(cfg, work);
}

int main(int argc, char **argv)
{
    static const struct server_model model = {
        .name = "epoll_reuseport",
        .summary = "N processes, each serving connections with epoll on its own listener "
                   "(SO_REUSEPORT: the kernel hashes each connection to one).",
        .has_workers = true,
        .serves_in_children = true,
        .has_idle_timeout = true,
        .own_listeners = true,
        .serve = serve,
    };
    return server_main(argc, argv, &model);
}
