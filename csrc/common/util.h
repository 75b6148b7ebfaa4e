/* util.h -- small helpers every program in csrc/ shares.
 *
 * Error convention (one for the whole tree): helpers return -1 and leave
 * errno set; the caller decides whether that is fatal and reports it with
 * warn_errno() or die_errno(), which append strerror(errno).
 */
#ifndef LAB_UTIL_H
#define LAB_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Messages go to stderr as "<program>: <message>\n". */
void set_program_name(const char *argv0);
void warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void warn_errno(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
_Noreturn void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
_Noreturn void die_errno(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A write to a closed socket must return EPIPE, not kill the process. */
int ignore_sigpipe(void);

/* One read()/write(), retried on EINTR: >= 0 bytes, or -1 (EAGAIN included). */
ssize_t read_some(int fd, void *buf, size_t n);
ssize_t write_some(int fd, const void *buf, size_t n);

/* Loop over short transfers and EINTR.  read_full returns n, or fewer at
 * end of file; write_full returns n.  Both return -1 on error. */
ssize_t read_full(int fd, void *buf, size_t n);
ssize_t write_full(int fd, const void *buf, size_t n);

/* Set the soft RLIMIT_NOFILE to `want`, capped at the hard limit (raise or
 * lower).  Returns the soft limit now in force, or -1. */
long set_fd_limit(long want);

/* Monotonic clock, for measuring intervals. */
uint64_t now_ns(void);
double now_seconds(void);

/* Parse a whole decimal string into [min, max]: 0, or -1 with errno EINVAL
 * (not a number) or ERANGE (out of range). */
int parse_long(const char *s, long min, long max, long *out);

#endif
