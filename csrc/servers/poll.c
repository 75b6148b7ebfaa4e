/* poll.c -- one thread serves every connection: the event loop (loop.c)
 * waits with poll() (ev_poll.c).  Compare with select.c: the same loop, a
 * backend without select's FD_SETSIZE ceiling. */
#include "common/server_main.h"
#include "loop/loop.h"

int main(int argc, char **argv)
{
    static const struct server_model model = {
        .name = "poll",
        .summary = "Serves every connection from one thread, waiting with poll().",
        .has_idle_timeout = true,
        .serve = loop_serve,
    };
    return server_main(argc, argv, &model);
}
