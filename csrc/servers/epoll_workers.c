/* epoll_workers.c -- N worker processes, each running the epoll event loop
 * (loop.c + ev_epoll.c) on ONE shared listening socket, which each
 * registers with EPOLLEXCLUSIVE: a new connection wakes one (or a few)
 * idle workers, not all of them (compare select_fork.c, where every process
 * wakes); the first-registered idle worker is woken first, so load tends to
 * gather on it.
 *
 * Why a shared listener with EPOLLEXCLUSIVE rather than SO_REUSEPORT (one
 * listener per worker, the kernel hashing connections among them):
 *  - a worker that dies takes nothing with it: with SO_REUSEPORT the
 *    connections waiting in its own listener's queue are reset;
 *  - a busy worker does not get new connections it cannot take yet: the
 *    shared queue is drained by whichever worker is free, where
 *    SO_REUSEPORT's hash assigns them regardless of load;
 *  - it is the same loop as every other readiness model, differing in one
 *    flag (EV_EXCLUSIVE), and --port 0 needs no re-binding.
 * The price: one accept queue (and its lock) shared by every worker, where
 * SO_REUSEPORT scales accept itself across CPUs. */
#include "common/server_main.h"
#include "common/workers.h"
#include "loop/loop.h"

static int serve(const struct server_config *cfg)
{
    return serve_with_workers(cfg, loop_serve);
}

int main(int argc, char **argv)
{
    static const struct server_model model = {
        .name = "epoll_workers",
        .summary = "N processes, each serving connections with epoll on one shared listener "
                   "(EPOLLEXCLUSIVE).",
        .has_workers = true,
        .serves_in_children = true,
        .serve = serve,
    };
    return server_main(argc, argv, &model);
}
