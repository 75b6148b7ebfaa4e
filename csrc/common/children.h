/* children.h -- child processes a server forks and answers for: worker
 * processes (select_fork, epoll_workers, prefork) and one process per
 * connection (fork).
 *
 * Every child is forked with PR_SET_PDEATHSIG(SIGTERM), so it cannot
 * outlive the server even if the server is killed with SIGKILL.  The server
 * learns of dead children through a descriptor (children_fd()) that it
 * watches next to its others, reaps them with children_reap(), and on
 * SIGTERM forwards the signal and reaps them all (children_stop()).
 */
#ifndef LAB_CHILDREN_H
#define LAB_CHILDREN_H

#include <stdbool.h>
#include <sys/types.h>

#include "common/server_main.h"

struct children;

/* Start tracking children (once per server; SIGCHLD is then blocked in the
 * parent and delivered through children_fd()). */
struct children *children_new(void);
void children_free(struct children *c);

/* Readable when a child has ended: call children_reap(). */
int children_fd(const struct children *c);
int children_count(const struct children *c);

/* fork(): in the child, returns 0 with the death signal set, the parent's
 * stop pipe and children_fd() closed, and signals unblocked (the child must
 * not use c again); in the parent,
 * the child's pid, or -1 with errno (EAGAIN: out of processes). */
pid_t children_fork(struct children *c);

/* Reap every child that has ended, without waiting; for each, call
 * ended(pid, status, arg) (may be NULL).  Returns how many were reaped. */
int children_reap(struct children *c, void (*ended)(pid_t pid, int status, void *arg), void *arg);

/* SIGTERM to every child, then reap them all; a child still running after
 * timeout_ms gets SIGKILL.  Returns how many had to be killed. */
int children_stop(struct children *c, int timeout_ms);

/* Describe a wait status for a message: "exited with status 3",
 * "was killed by signal 9 (Killed)". */
const char *children_describe(int status, char *buf, size_t size);

#endif
