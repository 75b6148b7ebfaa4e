/* prefork.c -- N processes forked in advance, each blocking in accept() on
 * the shared listener and serving its connection to the end, like the
 * iterative server (Apache's prefork).  N processes serve N clients at a
 * time; the others wait in the listen queue until a process is free. */
#include "common/blocking.h"
#include "common/server_main.h"
#include "common/workers.h"

static int accept_and_serve(const struct server_config *cfg)
{
    for (;;) { /* SIGTERM ends the worker (server_after_fork) */
        int fd = server_accept(cfg->listen_fd, false);
        if (fd >= 0)
            serve_blocking(fd, cfg->service);
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
        .serve = serve,
    };
    return server_main(argc, argv, &model);
}
