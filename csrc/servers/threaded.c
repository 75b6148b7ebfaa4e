/* threaded.c -- thread per connection: the main thread accepts, and each
 * connection gets its own detached thread running the blocking session.
 * On SIGTERM it reports its counters (server_main.h). */
#include <errno.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdint.h>
#include <unistd.h>

#include "common/blocking.h"
#include "common/server_main.h"
#include "common/util.h"

/* Small stacks so thousands of connections fit in memory; a session keeps
 * its buffers on the heap. */
#define THREAD_STACK (256 * 1024)

static const service_t *service;
static double idle_timeout;

static void *connection_thread(void *arg)
{
    serve_blocking((int)(intptr_t)arg, service, idle_timeout);
    return NULL;
}

static int serve(const struct server_config *cfg)
{
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, THREAD_STACK);
    service = cfg->service;
    idle_timeout = cfg->idle_timeout;
    server_report_counters_on_stop();

    for (;;) {
        int fd = server_accept(cfg->listen_fd, false);
        atomic_fetch_add(&server_counters.listener_wakeups, 1); /* a blocking accept returned */
        if (fd < 0)
            continue;
        pthread_t tid;
        int err = pthread_create(&tid, &attr, connection_thread, (void *)(intptr_t)fd);
        if (err != 0) { /* out of threads or memory: drop this client, keep serving */
            errno = err;
            warn_errno("cannot start a thread: closing a connection");
            close(fd);
        }
    }
    return 0; /* not reached: SIGTERM ends the process */
}

int main(int argc, char **argv)
{
    static const struct server_model model = {
        .name = "threaded",
        .summary = "Serves each connection in its own thread.",
        .has_idle_timeout = true,
        .serve = serve,
    };
    return server_main(argc, argv, &model);
}
