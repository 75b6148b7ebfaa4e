/* select_fork.c -- seed 003's "select with fork": N forked processes, each
 * running the select event loop (loop.c + ev_select.c) on the SAME
 * listening socket, inherited across fork().  A new connection makes the
 * listener readable in every process, so all of them wake: the thundering
 * herd.  The first to run accepts it; the others mostly re-check the
 * listener inside select() and sleep again there, unseen (each wakeup cost
 * a context switch all the same).  Only a worker that got past the re-check
 * before the winner's accept() finds nothing (EAGAIN), which its counters
 * line (server_main.h) shows as futile_accepts.  Compare
 * with epoll_workers.c and epoll_reuseport.c. */
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
        .name = "select_fork",
        .summary = "N processes, each serving connections with select() on one shared listener.",
        .has_workers = true,
        .serves_in_children = true,
        .has_idle_timeout = true,
        .serve = serve,
    };
    return server_main(argc, argv, &model);
}
