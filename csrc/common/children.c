/* children.c -- see children.h. */
#include "children.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/util.h"

struct children {
    pid_t *pids; /* the live children, unordered */
    int count, cap;
    int sigchld_fd; /* a signalfd for SIGCHLD */
};

struct children *children_new(void)
{
    struct children *c = calloc(1, sizeof *c);
    if (c == NULL)
        return NULL;
    /* SIGCHLD blocked and read from a descriptor: no handler racing the
     * main loop, and the loop can wait for a dead child like for a socket. */
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    if (sigprocmask(SIG_BLOCK, &chld, NULL) < 0 ||
        (c->sigchld_fd = signalfd(-1, &chld, SFD_NONBLOCK | SFD_CLOEXEC)) < 0) {
        free(c);
        return NULL;
    }
    return c;
}

void children_free(struct children *c)
{
    if (c == NULL)
        return;
    close(c->sigchld_fd);
    free(c->pids);
    free(c);
}

int children_fd(const struct children *c)
{
    return c->sigchld_fd;
}

int children_count(const struct children *c)
{
    return c->count;
}

pid_t children_fork(struct children *c)
{
    if (c->count == c->cap) {
        int cap = c->cap ? 2 * c->cap : 16;
        pid_t *pids = realloc(c->pids, (size_t)cap * sizeof *pids);
        if (pids == NULL) {
            errno = ENOMEM;
            return -1;
        }
        c->pids = pids;
        c->cap = cap;
    }
    /* Hold SIGTERM/SIGINT until the child has its own handling of them: a
     * signal in between would otherwise write to the parent's stop pipe. */
    sigset_t stop, old;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    sigprocmask(SIG_BLOCK, &stop, &old);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        server_after_fork();
        close(c->sigchld_fd); /* the child answers for no children */
        c->sigchld_fd = -1;
        c->count = 0;
        /* Die with the parent; it may have died before this line. */
        if (prctl(PR_SET_PDEATHSIG, SIGTERM) < 0 || getppid() != parent)
            _exit(0);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        return 0;
    }
    int err = errno;
    if (pid > 0)
        c->pids[c->count++] = pid;
    sigprocmask(SIG_SETMASK, &old, NULL);
    errno = err;
    return pid;
}

static void forget(struct children *c, pid_t pid)
{
    for (int i = 0; i < c->count; i++)
        if (c->pids[i] == pid) {
            c->pids[i] = c->pids[--c->count];
            return;
        }
}

int children_reap(struct children *c, void (*ended)(pid_t pid, int status, void *arg), void *arg)
{
    struct signalfd_siginfo info;
    while (read(c->sigchld_fd, &info, sizeof info) > 0)
        ; /* signals merge: one SIGCHLD may stand for several children */
    int reaped = 0, status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        forget(c, pid);
        reaped++;
        if (ended != NULL)
            ended(pid, status, arg);
    }
    return reaped;
}

int children_stop(struct children *c, int timeout_ms)
{
    for (int i = 0; i < c->count; i++)
        kill(c->pids[i], SIGTERM);
    uint64_t deadline = now_ns() + (uint64_t)timeout_ms * 1000000u;
    while (c->count > 0) {
        children_reap(c, NULL, NULL);
        uint64_t now = now_ns();
        if (c->count == 0 || now >= deadline)
            break;
        struct pollfd p = { .fd = c->sigchld_fd, .events = POLLIN };
        poll(&p, 1, (int)((deadline - now) / 1000000u) + 1);
    }
    int killed = c->count;
    for (int i = 0; i < c->count; i++)
        kill(c->pids[i], SIGKILL);
    while (c->count > 0) {
        pid_t pid = waitpid(-1, NULL, 0);
        if (pid < 0 && errno != EINTR)
            break; /* ECHILD: none left */
        if (pid > 0)
            forget(c, pid);
    }
    return killed;
}

const char *children_describe(int status, char *buf, size_t size)
{
    if (WIFEXITED(status))
        snprintf(buf, size, "exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, size, "was killed by signal %d (%s)", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
    else
        snprintf(buf, size, "ended (wait status %#x)", (unsigned)status);
    return buf;
}
