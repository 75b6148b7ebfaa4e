/* events_inflight.c -- exchanges in flight, for Little's law: once per
 * INFLIGHT_INTERVAL_NS after the warm-up, at a random instant within each
 * period, each thread counts its exchanges in flight from the schedule and its
 * connections' state (those due after the warm-up, the ones the latencies measure: a backlog
 * the warm-up left is not counted), never from the latencies, so inflight.mean = completed_rps
 * x latency mean checks two measurements, not one computed twice
 * (docs/loadgen-events.md).
 */
#include "loadgen/events.h"

uint64_t events_random(struct driver *d)
{
    d->rng ^= d->rng << 13;
    d->rng ^= d->rng >> 7;
    d->rng ^= d->rng << 17;
    return d->rng;
}

/* Exchanges of this thread in flight now (see this file's first comment). */
static long inflight_now(const struct driver *d, uint64_t now)
{
    long n = 0;
    if (!d->open_loop) {
        for (long i = 0; i < d->active; i++)
            n += d->conns[i].phase == CONN_BUSY || (d->conns[i].phase == CONN_CONNECTING && d->o->reconnect);
        return n;
    }
    /* g_due: the last exchange of the run due by now (-1: none yet). */
    long g_due = now < d->start_ns ? -1 : arrivals_due_by(&d->run->arrivals, now - d->start_ns) - 1;
    for (long i = 0; i < d->active; i++) {
        const struct conn *c = &d->conns[i];
        if (c->phase == CONN_CLOSED || (c->phase == CONN_CONNECTING && !d->o->reconnect) || g_due < c->id)
            continue;
        long due = (g_due - c->id) / d->o->clients + 1;  /* its exchanges due by now */
        if (due > c->planned)
            due = c->planned;
        /* ... of those the latencies measure: due at or after the warm-up's end (g >= batches_from),
         * so that the in-flight mean and completed_rps x the latency mean count the same exchanges */
        long first = d->batches_from > c->id ? (d->batches_from - c->id + d->o->clients - 1) / d->o->clients : 0;
        long from = c->next > first ? c->next : first;
        if (due > from)
            n += due - from;
    }
    return n;
}

static bool warmed_up(const struct driver *d, uint64_t now)
{
    if (d->o->warmup_s > 0)
        return now >= d->start_ns + (uint64_t)(d->o->warmup_s * 1e9);
    if (d->o->warmup_requests > 0)
        return atomic_load(&d->run->completed) >= d->o->warmup_requests;
    return true;
}

/* The sample due at instant `at` (now or a little before), then the random
 * instant of the next period.  It is taken as of `at`, the schedule up to then
 * and the connections as they were (no event handled since): a thread that
 * was descheduled past `at` must not count the exchanges that fell due while
 * it could not run, or the samples would gather at the ends of its stalls. */
void events_sample_inflight(struct driver *d, uint64_t at)
{
    if (warmed_up(d, at)) {
        long n = inflight_now(d, at);
        d->out->inflight_sum += (double)n;
        d->out->inflight_samples++;
        if (n > d->out->inflight_max)
            d->out->inflight_max = n;
    }
    d->sample_period += INFLIGHT_INTERVAL_NS;
    d->next_sample = d->sample_period + events_random(d) % INFLIGHT_INTERVAL_NS;
}
