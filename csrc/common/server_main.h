/* server_main.h -- what every server binary shares: flags, start-up, stop.
 *
 * A model file defines its serve() and hands it to server_main():
 *
 *     int main(int argc, char **argv) { return server_main(argc, argv, &model); }
 *
 * server_main parses the flags every model shares:
 *   --port N            0 = any free port (the default)
 *   --host H            default 127.0.0.1
 *   --service S         top|echo|sink
 *   --backlog N         listen()'s backlog, 1..65535 (default SOMAXCONN); the
 *                       kernel silently caps it at net.core.somaxconn
 *   --idle-timeout S    seconds (fractions allowed, > 0): a connection on which
 *                       nothing moved, either way, for S seconds is closed
 *                       ("shed"); default 0 = never.  Models that cannot do it
 *                       (uring, busypoll, aio) refuse the flag.
 *   --workers N         only if the model has workers
 *   --expect N [--expect-timeout S]   see expect.h; not for models that
 *                       serve in child processes
 *   --help
 * then ignores SIGPIPE; raises the open-file limit to its hard limit;
 * listens; prints exactly "listening <port>\n" on stdout (the first line it
 * ever prints); then calls serve().  SIGTERM or SIGINT ends the process with
 * status 0 at once, unless the model asked for server_stop_fd() to shut down
 * by itself.  A model with workers that is given no --workers gets one per
 * usable CPU.
 *
 * A model with own_listeners (epoll_reuseport) gets no listening socket:
 * cfg->listen_fd is only bound, to hold the port (cfg->port), each worker
 * opens its own listener, and serve() calls server_announce() once all of
 * them listen.
 *
 * Counters (the "thundering herd" lesson): each process that accepts counts
 * in server_counters, and reports them when it stops, as ONE line on stdout
 * written with one write(2) (so the lines of several workers never mix):
 *
 *     counters pid=<pid> accepted=<n> futile_accepts=<n> listener_wakeups=<n> shed_idle=<n>
 *
 * A loop process (loop.c) reports when loop_serve() returns; a blocking
 * model that asked with server_report_counters_on_stop() reports from the
 * SIGTERM handler, just before it ends the process.
 */
#ifndef LAB_SERVER_MAIN_H
#define LAB_SERVER_MAIN_H

#include <stdbool.h>
#include "services/session.h"

struct server_config {
    int listen_fd;             /* blocking, close-on-exec (own_listeners: bound, not listening) */
    const service_t *service;
    int workers;               /* 0 unless the model has workers */
    int backlog;               /* --backlog, for a worker opening its own listener */
    double idle_timeout;       /* --idle-timeout in seconds; 0: never shed */
    bool own_listeners;        /* the model's workers each open their own listener */
    const char *host;          /* where the listener is bound ... */
    int port;                  /* ... and its port (the one picked, for --port 0) */
};

struct server_model {
    const char *name;          /* "iterative", "threaded", ... */
    const char *summary;       /* one line for --help */
    bool has_workers;
    bool serves_in_children;   /* forks: --expect's counters would be per child */
    bool has_idle_timeout;     /* takes --idle-timeout (the others refuse it) */
    bool own_listeners;        /* each worker opens its own SO_REUSEPORT listener */
    /* Serve until stopped; the return value is the exit status. */
    int (*serve)(const struct server_config *cfg);
};

int server_main(int argc, char **argv, const struct server_model *model);

/* Print "listening <port>" on stdout and flush (server_main does it, except
 * for a model with own_listeners, whose serve() calls it when ready). */
void server_announce(int port);

/* This process's counters (a worker's own: a forked worker inherits zeros,
 * as the parent never accepts).  Atomic, so threads may count and the
 * SIGTERM handler may read them. */
struct server_counters {
    _Atomic unsigned long accepted;         /* accept() gave us a connection */
    _Atomic unsigned long futile_accepts;   /* woken for the listener, first accept said EAGAIN */
    _Atomic unsigned long listener_wakeups; /* told the listener was ready (blocking: accept returned) */
    _Atomic unsigned long shed_idle;        /* connections closed by --idle-timeout */
};
extern struct server_counters server_counters;

/* Write the counters line to stdout with one write(2); async-signal-safe. */
void server_report_counters(void);
/* For a process that SIGTERM ends at once (no server_stop_fd()): report the
 * counters first, from the signal handler. */
void server_report_counters_on_stop(void);

/* accept() that keeps a server alive when it runs out of descriptors
 * (EMFILE/ENFILE): with the spare-descriptor trick of libev and libuv it
 * frees a reserved descriptor, accepts, and sheds (closes) the connection
 * unless descriptors came free meanwhile.  Counts server_counters.accepted
 * (listener_wakeups is the caller's: only it knows what woke it).
 * Returns the new fd, or -1: errno
 * EAGAIN means nothing is waiting (non-blocking listener); any other errno
 * was handled here (a connection shed or aborted): just try again. */
int server_accept(int listen_fd, bool nonblocking);

/* Around code that opens descriptors outside server_accept (the top service's
 * /proc scan, in a thread per connection): while the spare's slot is free for
 * the waiting connection, no other thread may take it.  Openers hold this
 * shared; the spare's trick holds it alone (a writer-preferring lock, so a
 * stream of scans cannot keep shedding waiting).  An opener that skipped it
 * could take the freed slot; the server then warns "lost the spare descriptor"
 * and cannot shed until a descriptor comes free. */
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
