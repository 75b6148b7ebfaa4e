/* loop.h -- one thread serving every connection, woken by a readiness
 * backend (ev.h).  A readiness model's serve() is just loop_serve(). */
#ifndef LAB_LOOP_H
#define LAB_LOOP_H

#include "common/server_main.h"

/* Serve until SIGTERM/SIGINT, then free everything and return 0. */
int loop_serve(const struct server_config *cfg);

#endif
