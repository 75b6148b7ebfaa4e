/* workers.h -- a fixed set of worker processes, all serving the one
 * listening socket they inherit, and the parent that supervises them
 * (select_fork, epoll_workers, prefork).
 *
 * The parent forks cfg->workers workers, each running work(cfg), then only
 * watches: on SIGTERM it forwards the signal to every worker, reaps them
 * all and returns 0.  A worker that dies on its own (a crash, a SIGKILL)
 * is reported on stderr and replaced, so the server keeps its capacity;
 * if workers keep dying (more deaths within a second than there are
 * workers) the parent stops the rest and returns 1 rather than fork in a
 * loop.
 *
 * Workers that open their own listener (cfg->own_listeners: epoll_reuseport)
 * must say when they listen, with workers_ready(): the parent prints
 * "listening <port>" only once cfg->workers of them did, so a client that
 * connects as soon as it reads that line always finds every listener.  The
 * handshake is a pipe: each worker writes one byte to it; the parent counts.
 */
#ifndef LAB_WORKERS_H
#define LAB_WORKERS_H

#include "common/server_main.h"

int serve_with_workers(const struct server_config *cfg, int (*work)(const struct server_config *cfg));

/* In a worker (own_listeners only): "my listener listens". */
void workers_ready(void);

#endif
