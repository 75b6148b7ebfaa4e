/* iterative.c -- the iterative model: one connection at a time, served to
 * its end before the next is accepted.  Simple, and a single slow or silent
 * client makes every other client wait: that is the lesson (--idle-timeout
 * bounds how long).  On SIGTERM it reports its counters (server_main.h). */
#include <errno.h>
#include <stdatomic.h>

#include "common/blocking.h"
#include "common/server_main.h"

static int serve(const struct server_config *cfg)
{
    server_report_counters_on_stop();
    for (;;) {
        int fd = server_accept(cfg->listen_fd, false);
        atomic_fetch_add(&server_counters.listener_wakeups, 1); /* a blocking accept returned */
        if (fd >= 0)
            serve_blocking(fd, cfg->service, cfg->idle_timeout);
    }
    return 0; /* not reached: SIGTERM ends the process */
}

int main(int argc, char **argv)
{
    static const struct server_model model = {
        .name = "iterative",
        .summary = "Serves one connection at a time, in order of arrival.",
        .has_idle_timeout = true,
        .serve = serve,
    };
    return server_main(argc, argv, &model);
}
