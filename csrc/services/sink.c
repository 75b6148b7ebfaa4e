/* sink.c -- the `sink` service: "PUT <n>\n" then n bytes of body; reply
 * "OK <n> <reads>\n", reads = how many read calls delivered body bytes. */
#include "session.h"

#include <stdio.h>

#define SINK_MAX_BODY (1LL << 40) /* far above any experiment; bounds the arithmetic */
#define SINK_REPLY_MAX 64

struct sink_state {
    bool in_body;
    long long size, left, reads;
};

/* Parse "PUT <n>": 0, or -1 after session_fail(). */
static int parse_put(session_t *s, struct sink_state *st, const char *line, size_t len)
{
    long long n = request_number(s, line, len, "PUT", SINK_MAX_BODY, "PUT <n>",
                                 "n must be a byte count from 0 to 2^40");
    if (n < 0)
        return -1;
    st->in_body = true;
    st->size = st->left = n;
    st->reads = 0;
    return 0;
}

static void reply_ok(session_t *s, struct sink_state *st)
{
    char *out = session_out_reserve(s, SINK_REPLY_MAX);
    if (out == NULL) {
        session_fail(s, "server out of memory");
        return;
    }
    int n = snprintf(out, SINK_REPLY_MAX, "OK %lld %lld\n", st->size, st->reads);
    session_out_commit(s, (size_t)n);
    st->in_body = false;
}

static size_t sink_consume(session_t *s, void *state, const char *in, size_t len)
{
    struct sink_state *st = state;
    size_t done = 0;
    /* One call follows one read, so body bytes in it count as one read (bytes
     * left waiting behind a reply that had to drain count with them). */
    bool counted = false;

    while (done < len) {
        if (st->in_body) {
            size_t take = (size_t)st->left < len - done ? (size_t)st->left : len - done;
            if (take > 0 && !counted) {
                st->reads++;
                counted = true;
            }
            st->left -= (long long)take;
            done += take;
            if (st->left == 0)
                reply_ok(s, st);
            continue;
        }
        /* A new request needs room for its reply: else wait for the output to drain. */
        if (session_out_room(s) < SINK_REPLY_MAX)
            break;
        size_t line_len, used;
        int found = request_line(s, in + done, len - done, &line_len, &used);
        if (found == 0)
            break;
        if (found < 0)
            return len; /* ERR sent */
        if (parse_put(s, st, in + done, line_len) < 0)
            return len;
        done += used;
        counted = false; /* this read delivers the new body's first bytes too, if any follow */
        if (st->left == 0)
            reply_ok(s, st); /* PUT 0 */
    }
    return done;
}

const service_t sink_service = { .name = "sink", .state_size = sizeof(struct sink_state),
                                 .consume = sink_consume };
