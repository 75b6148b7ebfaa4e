/* server_main.h -- what every server binary shares: flags, start-up, stop.
 *
 * A model file defines its serve() and hands it to server_main():
 *
 *     int main(int argc, char **argv) { return server_main(argc, argv, &model); }
 *
 * server_main parses --port N (0 = any free port), --host H (default
 * 127.0.0.1), --service top|echo|sink, --workers N (only if the model has
 * workers), --expect N [--expect-timeout S] (see expect.h; not for models
 * that serve in child processes) and --help; ignores SIGPIPE; raises the open-file limit to its
 * hard limit; listens; prints exactly "listening <port>\n" on stdout; then
 * calls serve().  SIGTERM or SIGINT ends the process with status 0 at once,
 * unless the model asked for server_stop_fd() to shut down by itself.
 * A model with workers that is given no --workers gets one per usable CPU.
 */
#ifndef LAB_SERVER_MAIN_H
#define LAB_SERVER_MAIN_H

#include <stdbool.h>
#include "services/session.h"

struct server_config {
    int listen_fd;             /* blocking, close-on-exec */
    const service_t *service;
    int workers;               /* 0 unless the model has workers */
};

struct server_model {
    const char *name;          /* "iterative", "threaded", ... */
    const char *summary;       /* one line for --help */
    bool has_workers;
    bool serves_in_children;   /* forks: --expect's counters would be per child */
    /* Serve until stopped; the return value is the exit status. */
    int (*serve)(const struct server_config *cfg);
};

int server_main(int argc, char **argv, const struct server_model *model);

/* accept() that keeps a server alive when it runs out of descriptors
 * (EMFILE/ENFILE): with the spare-descriptor trick of libev and libuv it
 * frees a reserved descriptor, accepts, and sheds (closes) the connection
 * unless descriptors came free meanwhile.  Returns the new fd, or -1: errno
 * EAGAIN means nothing is waiting (non-blocking listener); any other errno
 * was handled here (a connection shed or aborted): just try again. */
int server_accept(int listen_fd, bool nonblocking);

/* Around code that opens descriptors outside server_accept (the top service's
 * /proc scan, in a thread per connection): while the spare's slot is free for
 * the waiting connection, no other thread may take it.  Openers hold this
 * shared; the spare's trick holds it alone (a writer-preferring lock, so a
 * stream of scans cannot keep shedding waiting). */
void server_descriptors_enter(void);
void server_descriptors_leave(void);

/* A descriptor that becomes readable when SIGTERM/SIGINT arrives, for a
 * model that wants to free everything and return from serve() instead of
 * being ended at once (so LeakSanitizer can check it). */
int server_stop_fd(void);

/* In a child just forked from a server: forget the parent's stop pipe, so
 * SIGTERM ends the child at once (or wakes only the child, once it asks for
 * its own server_stop_fd()). */
void server_after_fork(void);

#endif
