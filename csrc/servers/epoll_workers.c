/* epoll_workers.c -- N worker processes, each running the epoll event loop
 * (loop.c + ev_epoll.c) on ONE shared listening socket, which each
 * registers with EPOLLEXCLUSIVE: a new connection wakes one (or a few)
 * idle workers, not all of them (compare select_fork.c, where every process
 * wakes); the first-registered idle worker is woken first, so load tends to
 * gather on it.
 *
 * Why "first-registered" (Linux's fs/eventpoll.c and kernel/sched/wait.c):
 * epoll_ctl(EPOLL_CTL_ADD) with EPOLLEXCLUSIVE puts the worker's entry on
 * the listener's wait queue with add_wait_queue_exclusive(), which appends
 * it at the TAIL, once and for all (ep_ptable_queue_proc).  A new
 * connection wakes that queue with room for one exclusive wakeup:
 * __wake_up_common() walks it from the HEAD and stops after the first
 * exclusive entry whose callback says it woke someone.  ep_poll_callback()
 * says so only if that worker is asleep in epoll_wait(); a busy worker's
 * entry still marks the listener ready in ITS epoll (it will look later,
 * maybe to find nothing: futile_accepts) and the walk goes on to the next.
 * So the idle worker that registered first takes the connection, every
 * time it is idle.  tests/servers/test_server_limits.py measures it with
 * sequential connections (the counters line, server_main.h).
 *
 * Why a shared listener with EPOLLEXCLUSIVE rather than SO_REUSEPORT (one
 * listener per worker, the kernel hashing connections among them: see
 * epoll_reuseport.c, the same loop with the other choice):
 *  - a worker that dies takes nothing with it: with SO_REUSEPORT the
 *    connections waiting in its own listener's queue are reset;
 *  - a busy worker does not get new connections it cannot take yet: the
 *    shared queue is drained by whichever worker is free, where
 *    SO_REUSEPORT's hash assigns them regardless of load;
 *  - it is the same loop as every other readiness model, differing in one
 *    flag (EV_EXCLUSIVE), and --port 0 needs no re-binding.
 * The price: one accept queue (and its lock) shared by every worker, where
 * SO_REUSEPORT scales accept itself across CPUs; a worker woken late may
 * find the queue already emptied (futile_accepts > 0, never with
 * SO_REUSEPORT); and the load is uneven by design (above). */
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
        .has_idle_timeout = true,
        .serve = serve,
    };
    return server_main(argc, argv, &model);
}
