/* blocking.h -- serve one connection to its end with blocking I/O (the
 * models with a thread of control per connection: iterative, threaded,
 * pool, fork, prefork).
 *
 * --idle-timeout S: the socket gets SO_RCVTIMEO and SO_SNDTIMEO of S, so a
 * read or write that waited S seconds without moving a byte fails with
 * EAGAIN, and the connection is then closed (shed) and counted in
 * server_counters.shed_idle.  Precisely: the connection lives as long as no
 * single read or write waits longer than S.  A blocking write that moves
 * some bytes and then stalls returns what it moved (progress), and the
 * next write gets its own S; so a reader that never reads is shed after at
 * most about 2 S.  Time spent computing a reply is not waiting, and a
 * connection still queued (pool's queue, the listen backlog) is not timed.
 */
#ifndef LAB_BLOCKING_H
#define LAB_BLOCKING_H

#include "services/session.h"

/* Read requests and write replies until the session is done, the client
 * closes or resets, or (idle_timeout_s > 0) a read or write waits longer
 * than idle_timeout_s seconds; then close fd. */
void serve_blocking(int fd, const service_t *svc, double idle_timeout_s);

#endif
