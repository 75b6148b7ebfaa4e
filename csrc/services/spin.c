/* spin.c -- the `spin` service, the lab's ground truth: "SPIN <us>\n" keeps
 * the server's CPU busy for <us> microseconds (0 to 1,000,000), then replies
 * "OK <us>\n".
 *
 * Its cost per request is known: the service time the request declares, plus
 * what the server's loop spends on reading, parsing and writing (measured
 * apart with SPIN 0: the lab's measurement floor).  The load generator draws
 * each request's service time from a declared distribution (fixed or
 * exponential, loadgen --spin-us, --spin-dist), so a single-threaded server
 * under Poisson arrivals is an M/D/1 or M/M/1 queue whose waiting time
 * queueing theory gives in advance (labkit/queue_theory.py).
 *
 * The time is elapsed time, spent busy: the loop asks CLOCK_MONOTONIC until
 * the time has passed, never sleeps, and so occupies the server's CPU and
 * its loop for all of it, as real work would.  Were the thread descheduled
 * meanwhile, the request would end at its time all the same, or as soon as
 * the thread is back on a CPU if that is later: the spin does not add the
 * time it lost.  Pinning (as the lab does) limits where the server runs, not
 * what else runs on that CPU: kernel threads, softirqs (the network's
 * receive work among them) and unpinned processes may still take it, and
 * their time is then inside the declared spin, which theory's server never
 * shares.
 */
#include "session.h"

#include <stdio.h>
#include <time.h>

#define SPIN_MAX_US 1000000L
#define SPIN_REPLY_MAX 32

static long long now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void spin_for(long us)
{
    long long until = now_ns() + us * 1000LL;
    while (now_ns() < until)
        ;
}

static size_t spin_consume(session_t *s, void *state, const char *in, size_t len)
{
    (void)state;
    size_t done = 0;
    while (done < len) {
        /* A request needs room for its reply: else wait for the output to drain. */
        if (session_out_room(s) < SPIN_REPLY_MAX)
            break;
        size_t line_len, used;
        int found = request_line(s, in + done, len - done, &line_len, &used);
        if (found == 0)
            break;
        if (found < 0)
            return len; /* ERR sent */
        long us = (long)request_number(s, in + done, line_len, "SPIN", SPIN_MAX_US, "SPIN <us>",
                                       "us must be microseconds from 0 to 1000000");
        if (us < 0)
            return len;
        done += used;
        spin_for(us);
        char *out = session_out_reserve(s, SPIN_REPLY_MAX);
        if (out == NULL) {
            session_fail(s, "server out of memory");
            return len;
        }
        session_out_commit(s, (size_t)snprintf(out, SPIN_REPLY_MAX, "OK %ld\n", us));
    }
    return done;
}

const service_t spin_service = { .name = "spin", .state_size = 0, .consume = spin_consume };
