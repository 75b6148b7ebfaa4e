/* top.c -- the `top` service: "TOP [k]\n" -> the k processes using the most
 * CPU, one "<pid> <utime> <stime> <name>\n" line each, then "END\n". */
#include "session.h"
#include "procstat.h"

#include "common/server_main.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOP_DEFAULT_K 2
#define TOP_MAX_K     1000
/* "<pid> <utime> <stime> <name>\n" at its longest. */
#define TOP_LINE_MAX  (10 + 1 + 20 + 1 + 20 + 1 + PROCSTAT_NAME_MAX + 1)

/* Parse "TOP" or "TOP <k>": k, or 0 after session_fail(). */
static int parse_request(session_t *s, const char *line, size_t len)
{
    char req[SESSION_LINE_MAX + 1];
    memcpy(req, line, len);
    req[len] = '\0';

    char *save, *verb = strtok_r(req, " \t", &save);
    if (verb == NULL) {
        session_fail(s, "empty request; expected TOP [k]");
        return 0;
    }
    if (strcmp(verb, "TOP") != 0) {
        session_fail(s, "unknown verb; expected TOP [k]");
        return 0;
    }
    char *arg = strtok_r(NULL, " \t", &save);
    if (arg == NULL)
        return TOP_DEFAULT_K;
    char *end;
    errno = 0;
    long k = strtol(arg, &end, 10);
    if (*end != '\0' || errno != 0 || k < 1 || k > TOP_MAX_K || strtok_r(NULL, " \t", &save)) {
        session_fail(s, "k must be a number from 1 to 1000");
        return 0;
    }
    return (int)k;
}

static void reply_top(session_t *s, int k)
{
    struct proc_cpu *procs = malloc((size_t)k * sizeof *procs);
    char *out = session_out_reserve(s, (size_t)k * TOP_LINE_MAX + sizeof "END\n");
    if (procs == NULL || out == NULL) {
        free(procs);
        session_fail(s, "server out of memory");
        return;
    }
    server_descriptors_enter(); /* the scan opens /proc files: not while the spare's slot is free */
    int n = procstat_top(procs, k);
    server_descriptors_leave();
    if (n < 0) { /* e.g. EMFILE: every descriptor is held by a connection */
        char why[96];
        snprintf(why, sizeof why, "cannot read /proc: %s", strerror(errno));
        free(procs);
        session_fail(s, why);
        return;
    }
    size_t used = 0;
    for (int i = 0; i < n; i++)
        used += (size_t)sprintf(out + used, "%d %llu %llu %s\n", procs[i].pid,
                                procs[i].utime, procs[i].stime, procs[i].name);
    memcpy(out + used, "END\n", 4);
    session_out_commit(s, used + 4);
    free(procs);
}

static size_t top_consume(session_t *s, void *state, const char *in, size_t len)
{
    (void)state;
    size_t done = 0;
    /* One reply at a time: the next request waits until this one is sent,
     * which bounds the output and stops a client that never reads. */
    while (session_out_pending(s) == 0) {
        size_t line_len, used;
        int found = request_line(s, in + done, len - done, &line_len, &used);
        if (found == 0)
            break;
        if (found < 0)
            return len; /* ERR sent */
        int k = parse_request(s, in + done, line_len);
        if (k == 0)
            return len;
        reply_top(s, k);
        done += used;
    }
    return done;
}

const service_t top_service = { .name = "top", .state_size = 0, .consume = top_consume };
