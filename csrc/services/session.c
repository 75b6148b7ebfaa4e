/* session.c -- the per-connection buffers and the rules every service shares. */
#include "session.h"

#include "common/expect.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern const service_t top_service, echo_service, sink_service, spin_service;
static const service_t *const services[] = { &top_service, &echo_service, &sink_service, &spin_service };

struct session {
    const service_t *svc;
    void *state;
    bool failed;           /* ERR queued: take no more requests */
    bool eof;              /* the client closed its side: answer what is complete, then stop */
    bool reading;          /* in[in_end..] was handed out for a read not yet reported: keep it in place */
    bool writing;          /* out[out_start..out_end) likewise, for a write: neither moved nor freed */
    char *in;              /* SESSION_IN_CAP bytes; unconsumed input is in[in_start, in_end) */
    size_t in_start, in_end;
    char *out;             /* grows on demand up to SESSION_OUT_CAP */
    size_t out_cap, out_start, out_end;
    long long bytes_in;    /* for --expect's report */
};

const service_t *service_find(const char *name)
{
    for (size_t i = 0; i < sizeof services / sizeof services[0]; i++)
        if (strcmp(services[i]->name, name) == 0)
            return services[i];
    return NULL;
}

const char *service_names(void)
{
    return "top|echo|sink|spin";
}

session_t *session_new(const service_t *svc)
{
    session_t *s = calloc(1, sizeof *s);
    if (s == NULL)
        return NULL;
    s->svc = svc;
    s->in = malloc(SESSION_IN_CAP);
    s->state = calloc(1, svc->state_size ? svc->state_size : 1);
    if (s->in == NULL || s->state == NULL) {
        free(s->in);
        free(s->state);
        free(s);
        return NULL;
    }
    expect_session_opened();
    return s;
}

void session_free(session_t *s)
{
    if (s == NULL)
        return;
    expect_session_closed(s->bytes_in);
    free(s->in);
    free(s->out);
    free(s->state);
    free(s);
}

/* Let the service handle whatever input is waiting. */
static void feed(session_t *s)
{
    if (!s->failed && s->in_end > s->in_start)
        s->in_start += s->svc->consume(s, s->state, s->in + s->in_start,
                                       s->in_end - s->in_start);
    /* Drop input nobody will answer: after an ERR, or an unfinished request
     * left when the client has closed and every complete one is answered.
     * Not while a read may still land at in_end: it would land past the end. */
    if (!s->reading && (s->failed || s->in_start == s->in_end || (s->eof && session_out_pending(s) == 0)))
        s->in_start = s->in_end = 0;
}

char *session_read_buf(session_t *s, size_t *len)
{
    if (s->failed || s->eof) {
        *len = 0;
        return NULL;
    }
    if (!s->reading && s->in_start > 0) { /* slide the unconsumed tail to the front */
        memmove(s->in, s->in + s->in_start, s->in_end - s->in_start);
        s->in_end -= s->in_start;
        s->in_start = 0;
    }
    *len = SESSION_IN_CAP - s->in_end;
    s->reading = *len > 0;
    return s->in + s->in_end;
}

void session_did_read(session_t *s, size_t n)
{
    s->reading = false;
    s->in_end += n;
    s->bytes_in += (long long)n;
    feed(s);
}

void session_did_eof(session_t *s)
{
    s->reading = false;
    s->eof = true;
    if (session_out_pending(s) == 0)
        feed(s);
}

const char *session_write_buf(session_t *s, size_t *len)
{
    *len = s->out_end - s->out_start;
    s->writing = *len > 0;
    return s->out == NULL ? NULL : s->out + s->out_start; /* no output buffer yet: NULL + 0 is UB */
}

void session_did_write(session_t *s, size_t n)
{
    s->writing = false;
    s->out_start += n;
    if (s->out_start == s->out_end) {
        s->out_start = s->out_end = 0;
        if (s->in_end > s->in_start) /* requests that waited for the output to drain */
            feed(s);
    }
}

bool session_done(const session_t *s)
{
    return session_out_pending(s) == 0 && (s->failed || (s->eof && s->in_end == s->in_start));
}

size_t session_out_pending(const session_t *s)
{
    return s->out_end - s->out_start;
}

size_t session_out_room(const session_t *s)
{
    if (s->writing) /* a write in flight reads the buffer: append only where it is, no moving, no growing */
        return s->out_cap - s->out_end;
    return SESSION_OUT_CAP - session_out_pending(s);
}

char *session_out_reserve(session_t *s, size_t n)
{
    if (n > session_out_room(s))
        return NULL;
    if (s->writing)
        return s->out + s->out_end;
    if (s->out_start > 0) {
        memmove(s->out, s->out + s->out_start, s->out_end - s->out_start);
        s->out_end -= s->out_start;
        s->out_start = 0;
    }
    if (s->out_end + n > s->out_cap) {
        size_t cap = s->out_cap ? s->out_cap : 256;
        while (cap < s->out_end + n)
            cap *= 2;
        if (cap > SESSION_OUT_CAP)
            cap = SESSION_OUT_CAP;
        char *bigger = realloc(s->out, cap);
        if (bigger == NULL)
            return NULL;
        s->out = bigger;
        s->out_cap = cap;
    }
    return s->out + s->out_end;
}

void session_out_commit(session_t *s, size_t n)
{
    s->out_end += n;
}

void session_fail(session_t *s, const char *reason)
{
    char line[128];
    int n = snprintf(line, sizeof line, "ERR %s\n", reason);
    if (n >= (int)sizeof line)
        n = sizeof line - 1;
    /* The output may be full of an earlier reply; the ERR still goes last. */
    char *room = session_out_reserve(s, (size_t)n);
    if (room != NULL) {
        memcpy(room, line, (size_t)n);
        session_out_commit(s, (size_t)n);
    }
    s->failed = true;
}

long long request_number(session_t *s, const char *line, size_t len, const char *verb, long long max,
                         const char *usage, const char *range)
{
    char req[SESSION_LINE_MAX + 1], why[SESSION_LINE_MAX];
    memcpy(req, line, len);
    req[len] = '\0';

    char *save, *word = strtok_r(req, " \t", &save);
    if (word == NULL || strcmp(word, verb) != 0) {
        snprintf(why, sizeof why, "%s; expected %s", word ? "unknown verb" : "empty request", usage);
        session_fail(s, why);
        return -1;
    }
    char *arg = strtok_r(NULL, " \t", &save), *end = NULL;
    errno = 0;
    long long n = arg ? strtoll(arg, &end, 10) : -1;
    if (arg == NULL || *end != '\0' || errno != 0 || n < 0 || n > max || strtok_r(NULL, " \t", &save)) {
        session_fail(s, range);
        return -1;
    }
    return n;
}

int request_line(session_t *s, const char *in, size_t len, size_t *line_len, size_t *used)
{
    size_t scan = len < SESSION_LINE_MAX + 1 ? len : SESSION_LINE_MAX + 1;
    const char *nl = memchr(in, '\n', scan);
    if (nl == NULL && len > SESSION_LINE_MAX) {
        session_fail(s, "request line longer than 1024 bytes");
        return -1;
    }
    if (nl == NULL)
        return 0;
    *used = (size_t)(nl - in) + 1;
    *line_len = (size_t)(nl - in);
    if (*line_len > 0 && in[*line_len - 1] == '\r')
        (*line_len)--;
    return 1;
}
