/* iterative.c -- the iterative model: one connection at a time, served to
 * its end before the next is accepted.  Simple, and a single slow or silent
 * client makes every other client wait: that is the lesson. */
#include <errno.h>

#include "common/blocking.h"
#include "common/server_main.h"

static int serve(const struct server_config *cfg)
{
    for (;;) {
        int fd = server_accept(cfg->listen_fd, false);
        if (fd >= 0)
            serve_blocking(fd, cfg->service);
    }
    return 0; /* not reached: SIGTERM ends the process */
}

int main(int argc, char **argv)
{
    static const struct server_model model = {
        .name = "iterative",
        .summary = "Serves one connection at a time, in order of arrival.",
        .serve = serve,
    };
    return server_main(argc, argv, &model);
}
