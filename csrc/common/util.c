/* util.c -- see util.h. */
#include "util.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static const char *program_name = "lab";

void set_program_name(const char *argv0)
{
    const char *slash = strrchr(argv0, '/');
    program_name = slash ? slash + 1 : argv0;
}

/* One fprintf per message, so lines from different threads do not mix. */
static void say_to_stderr(const char *fmt, va_list ap, int err)
{
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (err)
        fprintf(stderr, "%s: %s: %s\n", program_name, msg, strerror(err));
    else
        fprintf(stderr, "%s: %s\n", program_name, msg);
}

void warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    say_to_stderr(fmt, ap, 0);
    va_end(ap);
}

void warn_errno(const char *fmt, ...)
{
    int err = errno;
    va_list ap;
    va_start(ap, fmt);
    say_to_stderr(fmt, ap, err);
    va_end(ap);
    errno = err;
}

void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    say_to_stderr(fmt, ap, 0);
    va_end(ap);
    exit(EXIT_FAILURE);
}

void die_errno(const char *fmt, ...)
{
    int err = errno;
    va_list ap;
    va_start(ap, fmt);
    say_to_stderr(fmt, ap, err);
    va_end(ap);
    exit(EXIT_FAILURE);
}

int ignore_sigpipe(void)
{
    struct sigaction sa = { .sa_handler = SIG_IGN };
    sigemptyset(&sa.sa_mask);
    return sigaction(SIGPIPE, &sa, NULL);
}

ssize_t read_some(int fd, void *buf, size_t n)
{
    ssize_t got;
    do
        got = read(fd, buf, n);
    while (got < 0 && errno == EINTR);
    return got;
}

ssize_t write_some(int fd, const void *buf, size_t n)
{
    ssize_t put;
    do
        put = write(fd, buf, n);
    while (put < 0 && errno == EINTR);
    return put;
}

ssize_t read_full(int fd, void *buf, size_t n)
{
    size_t done = 0;
    while (done < n) {
        ssize_t got = read_some(fd, (char *)buf + done, n - done);
        if (got < 0)
            return -1;
        if (got == 0)
            break; /* end of file */
        done += (size_t)got;
    }
    return (ssize_t)done;
}

ssize_t write_full(int fd, const void *buf, size_t n)
{
    size_t done = 0;
    while (done < n) {
        ssize_t put = write_some(fd, (const char *)buf + done, n - done);
        if (put < 0)
            return -1;
        done += (size_t)put;
    }
    return (ssize_t)done;
}

long set_fd_limit(long want)
{
    struct rlimit lim;
    if (want < 0) {
        errno = EINVAL;
        return -1;
    }
    if (getrlimit(RLIMIT_NOFILE, &lim) < 0)
        return -1;
    rlim_t soft = (rlim_t)want;
    if (lim.rlim_max != RLIM_INFINITY && soft > lim.rlim_max)
        soft = lim.rlim_max;
    lim.rlim_cur = soft;
    if (setrlimit(RLIMIT_NOFILE, &lim) < 0)
        return -1;
    return soft > LONG_MAX ? LONG_MAX : (long)soft;
}

uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

double now_seconds(void)
{
    return (double)now_ns() / 1e9;
}

int parse_long(const char *s, long min, long max, long *out)
{
    char *end;
    if (s == NULL || *s == '\0' || *s == ' ' || *s == '\t') {
        errno = EINVAL;
        return -1;
    }
    errno = 0;
    long v = strtol(s, &end, 10);
    if (*end != '\0') {
        errno = EINVAL;
        return -1;
    }
    if (errno == ERANGE || v < min || v > max) {
        errno = ERANGE;
        return -1;
    }
    *out = v;
    return 0;
}
