/* workers.c -- see workers.h. */
#include "workers.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "common/children.h"
#include "common/util.h"

#define STOP_TIMEOUT_MS 800 /* SIGTERM to the workers, then SIGKILL: within the 1 s contract */

struct supervisor {
    struct children *children;
    const struct server_config *cfg;
    int (*work)(const struct server_config *cfg);
    time_t second; /* deaths are counted per second of the clock */
    int deaths;
    bool giving_up;
    int ready, announced; /* own_listeners: workers that said they listen; printed "listening"? */
};

/* own_listeners: the readiness pipe (one byte per worker that listens). */
static int ready_r = -1, ready_w = -1;

void workers_ready(void)
{
    if (ready_w < 0)
        return;
    (void)!write(ready_w, "r", 1);
    close(ready_w);
    ready_w = -1;
}

/* Fork one worker; in the worker, run it to its end. */
static void start_worker(struct supervisor *sv)
{
    pid_t pid = children_fork(sv->children);
    if (pid == 0) {
        if (ready_r >= 0)
            close(ready_r); /* the parent's end */
        exit(sv->work(sv->cfg));
    }
    if (pid < 0)
        warn_errno("cannot start a worker");
}

static void worker_ended(pid_t pid, int status, void *arg)
{
    struct supervisor *sv = arg;
    char how[128];
    if (time(NULL) != sv->second) {
        sv->second = time(NULL);
        sv->deaths = 0;
    }
    if (++sv->deaths > sv->cfg->workers) {
        warn("worker %d %s; workers keep dying, giving up", (int)pid,
             children_describe(status, how, sizeof how));
        sv->giving_up = true;
        return;
    }
    warn("worker %d %s; starting a new one", (int)pid, children_describe(status, how, sizeof how));
    start_worker(sv);
}

int serve_with_workers(const struct server_config *cfg, int (*work)(const struct server_config *cfg))
{
    struct supervisor sv = { .children = children_new(), .cfg = cfg, .work = work };
    if (sv.children == NULL)
        die_errno("cannot watch for workers ending");
    int stop_fd = server_stop_fd(); /* before forking: the workers forget it */
    /* Inherited by every worker: a SIGTERM before its work has a stop pipe of its own (or
     * while children_fork holds it) ends the worker at once, and it still owes its counters
     * line.  The parent keeps its stop pipe, so it never reports. */
    server_report_counters_on_stop();
    if (cfg->own_listeners) {
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0)
            die_errno("pipe");
        ready_r = p[0];
        ready_w = p[1];
    }
    for (int i = 0; i < cfg->workers; i++)
        start_worker(&sv);
    /* The parent keeps the write end too: its replacement workers inherit it, and
     * the read end never sees end-of-file while the server runs. */

    struct pollfd watched[] = {
        { .fd = stop_fd, .events = POLLIN },
        { .fd = children_fd(sv.children), .events = POLLIN },
        { .fd = ready_r, .events = POLLIN }, /* -1 (ignored by poll) without own_listeners */
    };
    while (!sv.giving_up && watched[0].revents == 0) {
        if (poll(watched, 3, -1) < 0 && errno != EINTR)
            die_errno("poll");
        if (watched[1].revents)
            children_reap(sv.children, worker_ended, &sv);
        if (watched[2].revents) { /* replacements say so too: keep draining */
            char bytes[64];
            ssize_t got = read(ready_r, bytes, sizeof bytes);
            if (got > 0)
                sv.ready += (int)got;
            if (!sv.announced && sv.ready >= cfg->workers) {
                server_announce(cfg->port);
                sv.announced = 1;
            }
        }
    }
    int killed = children_stop(sv.children, STOP_TIMEOUT_MS);
    if (killed > 0)
        warn("%d worker(s) ignored SIGTERM and were killed", killed);
    children_free(sv.children);
    if (ready_r >= 0) {
        close(ready_r);
        close(ready_w);
    }
    close(cfg->listen_fd);
    return sv.giving_up ? 1 : 0;
}
