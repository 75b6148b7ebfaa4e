/* batches.c -- the run's latencies by where they fall in the plan, and the open loop's
 * own figures: what an interval and a self-check that hold for a queue read.
 *
 * Invariants:
 *   - the batches divide the measured part of the plan: exchange g of planned N, the
 *     measured part starting at F (batches_from), is in batch (g - F) * BATCHES / (N - F),
 *     in every figure here and in latency_batches; a warm-up exchange is in none.  F is
 *     the warm-up's count, or, for a warm-up in seconds on an open loop, the exchanges
 *     the schedule has due before it; 0 otherwise (a closed loop's warm-up in seconds
 *     leaves its first batches empty: nothing says in advance where it ends);
 *   - requests_due_in_window counts the schedule, not the replies: every exchange due at or
 *     after the measured window's start and at or before its end (the last reply), sent or
 *     not, so a server that keeps up completes that many and one that cannot falls short.
 *
 *   - latency_batch_below[p][b] counts batch b's samples in the buckets up to the one that
 *     holds the whole run's percentile p (latency_us.p), so it adds up over the batches to
 *     the run's own count at or below its percentile; latency_batch_under[p][b] the same
 *     without that bucket;
 *
 * A queue's latencies are correlated, one request's with the next's, so the spread of a
 * run's samples says little about how far its percentile may be off; the percentiles of
 * long consecutive batches are nearly independent, and their spread bounds it (sectioning).
 */
#include "loadgen/loadgen.h"

#include "common/util.h"

#include <stdio.h>
#include <stdlib.h>

void batches_note_latency(struct outcome *out, long g, long planned, uint64_t corrected_ns,
                          uint64_t uncorrected_ns)
{
    hist_record(&out->corrected, corrected_ns);
    hist_record(&out->uncorrected, uncorrected_ns);
    hist_record(&out->halves[2 * g < planned ? 0 : 1], corrected_ns);
    long batch = planned > 0 && g > 0 ? g * BATCHES / planned : 0;
    batch = batch < BATCHES ? batch : BATCHES - 1;
    out->batch_sum_ns[batch] += (double)corrected_ns;
    out->batch_count[batch]++;
    hist_record(&out->batch[batch], corrected_ns);
}

void batches_add_latencies(struct outcome *into, const struct outcome *part)
{
    hist_merge(&into->corrected, &part->corrected);
    hist_merge(&into->uncorrected, &part->uncorrected);
    hist_merge(&into->halves[0], &part->halves[0]);
    hist_merge(&into->halves[1], &part->halves[1]);
    for (int b = 0; b < BATCHES; b++) {
        into->batch_sum_ns[b] += part->batch_sum_ns[b];
        into->batch_count[b] += part->batch_count[b];
        hist_merge(&into->batch[b], &part->batch[b]);
    }
    hist_merge(&into->lateness, &part->lateness);
}

/* The exchanges due from `from` to `to` (ns after the schedule's start), both included. */
static long due_between(const struct arrivals *a, uint64_t from, uint64_t to)
{
    return arrivals_due_by(a, to) - (from > 0 ? arrivals_due_by(a, from - 1) : 0);
}

long batches_from(const struct options *o, const struct arrivals *a, long planned)
{
    long from = 0;
    if (o->warmup_requests > 0)
        from = o->warmup_requests;
    else if (o->warmup_s > 0 && o->rate_rps > 0)  /* those due before the warm-up's end */
        from = arrivals_due_by(a, (uint64_t)(o->warmup_s * 1e9) - 1);
    return from < planned ? from : 0;
}

void batches_note_due_in_window(struct outcome *out, const struct arrivals *a, uint64_t start_ns)
{
    bool window = out->measure_from_ns >= start_ns && out->last_reply_ns > out->measure_from_ns;
    out->due_in_window = window ? due_between(a, out->measure_from_ns - start_ns, out->last_reply_ns - start_ns)
                                : -1;
}

static void print_us(const char *sep, bool given, uint64_t ns)
{
    if (given)
        printf("%s%.3f", sep, (double)ns / 1e3);
    else
        printf("%snull", sep);
}

/* "latency_batch_below": {"p50": [count of batch 0, ... of batch 19], "p90", "p99", "p999"}:
 * each batch's samples at or below the whole run's percentile (its bucket included), and
 * "latency_batch_under" the same strictly below that bucket.  How much the shares vary from
 * batch to batch is how far the run's percentile may be off (labkit/batches.py); the two
 * together place a bucket that holds many samples (a near-constant latency) at its middle,
 * so that it does not swing a batch's share from 0 to 1. */
static void print_batch_counts(const struct outcome *out, const char *key, bool inclusive)
{
    static const double percentiles[] = { 50, 90, 99, 99.9 };
    static const char *const names[] = { "p50", "p90", "p99", "p999" };
    printf("\"%s\":{", key);
    for (size_t p = 0; p < sizeof percentiles / sizeof percentiles[0]; p++) {
        size_t end = 0;  /* the buckets counted: [0, end) */
        if (out->corrected.total > 0)
            end = hist_bucket(hist_percentile(&out->corrected, percentiles[p])) + (inclusive ? 1 : 0);
        printf("%s\"%s\":[", p ? "," : "", names[p]);
        for (int b = 0; b < BATCHES; b++) {
            uint64_t counted = 0;
            for (size_t i = 0; i < end; i++)
                counted += out->batch[b].count[i];
            printf("%s%llu", b ? "," : "", (unsigned long long)counted);
        }
        putchar(']');
    }
    printf("},");
}

void batches_print_below(const struct outcome *out)
{
    print_batch_counts(out, "latency_batch_below", true);
    print_batch_counts(out, "latency_batch_under", false);
}

/* Open loop only (null otherwise): requests_due_in_window and the window's bounds in ns after
 * the first exchange's due time (null without a window); send_lateness_us. */
void batches_print_open_loop(const struct options *o, const struct outcome *out, bool window)
{
    bool open_loop = o->rate_rps > 0 && o->engine == ENGINE_EVENTS;
    bool due = open_loop && window && out->due_in_window >= 0;
    if (due)
        printf("\"requests_due_in_window\":%ld,\"measured_window_ns\":[%llu,%llu],", out->due_in_window,
               (unsigned long long)(out->measure_from_ns - out->first_send_ns),
               (unsigned long long)(out->last_reply_ns - out->first_send_ns));
    else
        printf("\"requests_due_in_window\":null,\"measured_window_ns\":null,");
    if (!open_loop) {
        printf("\"send_lateness_us\":null,");
        return;
    }
    const struct histogram *h = &out->lateness;
    printf("\"send_lateness_us\":{");
    print_us("\"p50\":", h->total > 0, hist_percentile(h, 50));
    print_us(",\"p99\":", h->total > 0, hist_percentile(h, 99));
    print_us(",\"max\":", h->total > 0, h->max);
    printf(",\"samples\":%llu},", (unsigned long long)h->total);
}
