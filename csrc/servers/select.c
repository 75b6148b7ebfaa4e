/* select.c -- one thread serves every connection: the event loop (loop.c)
 * waits with select() (ev_select.c) for whichever socket is ready.  Compare
 * with threaded.c: no thread per client, no blocking call on a client. */
#include "common/server_main.h"
#include "loop/loop.h"

int main(int argc, char **argv)
{
    static const struct server_model model = {
        .name = "select",
        .summary = "Serves every connection from one thread, waiting with select().",
        .has_idle_timeout = true,
        .serve = loop_serve,
    };
    return server_main(argc, argv, &model);
}
