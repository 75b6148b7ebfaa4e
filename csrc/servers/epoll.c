/* epoll.c -- one thread serves every connection: the event loop (loop.c)
 * waits with epoll, level-triggered (ev_epoll.c).  Compare with poll.c: the
 * same loop, a backend whose cost follows the active connections. */
#include "common/server_main.h"
#include "loop/loop.h"

int main(int argc, char **argv)
{
    static const struct server_model model = {
        .name = "epoll",
        .summary = "Serves every connection from one thread, waiting with epoll (level-triggered).",
        .has_idle_timeout = true,
        .serve = loop_serve,
    };
    return server_main(argc, argv, &model);
}
