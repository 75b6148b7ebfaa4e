/* blocking.h -- serve one connection to its end with blocking I/O (the
 * models with a thread of control per connection: iterative, threaded). */
#ifndef LAB_BLOCKING_H
#define LAB_BLOCKING_H

#include "services/session.h"

/* Read requests and write replies until the session is done, the client
 * closes or resets; then close fd. */
void serve_blocking(int fd, const service_t *svc);

#endif
