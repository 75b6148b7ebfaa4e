/* pool.c -- a fixed thread pool: the main thread accepts and puts each
 * connection in a bounded queue; N threads (--workers) take connections
 * from it and run the blocking session, each serving one connection at a
 * time.  Unlike threaded.c, no thread is created per client: N clients are
 * served at once, the next ones wait their turn.
 *
 * When the queue is full, the acceptor waits for room and stops accepting.
 * New clients then wait in the kernel's listen backlog (their connect()
 * succeeded, nothing answers yet), and once the backlog is full the kernel
 * stops completing handshakes and their connect() retries.  That is
 * back-pressure rather than refusal: accepting only to close would turn
 * clients away that a free thread could serve a moment later, and
 * accepting without bound would only move the unbounded queue into our
 * memory.  --idle-timeout starts counting when a thread takes the
 * connection, not while it waits in the queue.  On SIGTERM it reports its
 * counters (server_main.h). */
#include <errno.h>
#include <stdatomic.h>
#include <pthread.h>
#include <unistd.h>

#include "common/blocking.h"
#include "common/server_main.h"
#include "common/util.h"

#define QUEUE_CAP 64          /* accepted connections waiting for a thread */
#define THREAD_STACK (256 * 1024)

static struct {
    pthread_mutex_t lock;
    pthread_cond_t not_empty, not_full;
    int fds[QUEUE_CAP]; /* a ring: count entries from head */
    int head, count;
} queue = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER, { 0 }, 0, 0 };

static const service_t *service;
static double idle_timeout;

static void queue_put(int fd)
{
    pthread_mutex_lock(&queue.lock);
    while (queue.count == QUEUE_CAP)
        pthread_cond_wait(&queue.not_full, &queue.lock); /* full: stop accepting */
    queue.fds[(queue.head + queue.count++) % QUEUE_CAP] = fd;
    pthread_cond_signal(&queue.not_empty);
    pthread_mutex_unlock(&queue.lock);
}

static int queue_take(void)
{
    pthread_mutex_lock(&queue.lock);
    while (queue.count == 0)
        pthread_cond_wait(&queue.not_empty, &queue.lock);
    int fd = queue.fds[queue.head];
    queue.head = (queue.head + 1) % QUEUE_CAP;
    queue.count--;
    pthread_cond_signal(&queue.not_full);
    pthread_mutex_unlock(&queue.lock);
    return fd;
}

static void *pool_thread(void *arg)
{
    (void)arg;
    for (;;)
        serve_blocking(queue_take(), service, idle_timeout);
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

    for (int i = 0; i < cfg->workers; i++) {
        pthread_t tid;
        int err = pthread_create(&tid, &attr, pool_thread, NULL);
        if (err != 0) {
            errno = err;
            die_errno("cannot start thread %d of %d", i + 1, cfg->workers);
        }
    }
    for (;;) {
        int fd = server_accept(cfg->listen_fd, false);
        atomic_fetch_add(&server_counters.listener_wakeups, 1); /* a blocking accept returned */
        if (fd >= 0)
            queue_put(fd);
    }
    return 0; /* not reached: SIGTERM ends the process */
}

int main(int argc, char **argv)
{
    static const struct server_model model = {
        .name = "pool",
        .summary = "N threads serve the connections one at a time each; "
                   "the acceptor queues them (at most 64 waiting).",
        .has_workers = true,
        .has_idle_timeout = true,
        .serve = serve,
    };
    return server_main(argc, argv, &model);
}
