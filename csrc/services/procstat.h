/* procstat.h -- CPU time per process, from /proc/PID/stat.
 *
 * Plain C with no dependency on the servers: labkit also compiles this file
 * in-process with cffi, so a notebook calls the very code the servers run.
 */
#ifndef LAB_PROCSTAT_H
#define LAB_PROCSTAT_H

#include <stddef.h>

#define PROCSTAT_NAME_MAX 64

struct proc_cpu {
    int pid;
    unsigned long long utime, stime; /* clock ticks (sysconf(_SC_CLK_TCK)) */
    char name[PROCSTAT_NAME_MAX];
};

/* Parse one /proc/PID/stat line of len bytes (need not be NUL-terminated).
 * The name is the bytes between the FIRST '(' and the LAST ')' -- a name may
 * itself contain ") (" -- with non-printable bytes shown as '?', truncated to
 * fit.  Returns 0, or -1 if the line is malformed. */
int procstat_parse(const char *line, size_t len, struct proc_cpu *out);

/* The k processes with the most CPU time (utime + stime, ties: lower pid
 * first), most first, into out[0..k).  Returns how many were found (fewer
 * than k if fewer processes exist), or -1 with errno set.  Processes that
 * exit during the scan are skipped.  Uses no memory beyond out[]. */
int procstat_top(struct proc_cpu *out, int k);

#endif
