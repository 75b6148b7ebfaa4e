/* outcome.c -- the outcome's arithmetic: what the drivers count as they go (failures by
 * kind, connect times), and the figures the report derives from those counts (counts,
 * percentiles, windows, rates); report.c prints them and computes nothing.
 *
 * Invariants:
 *   - a figure that was not measured is not given (its has_ flag false, or a latency
 *     summary of 0 samples), so the report prints null for it, never a 0 that was not
 *     counted; a rate is given only over a window longer than 0;
 *   - requests_failed = requests_planned - requests_ok, requests_not_sent = requests_planned
 *     - requests_sent, connections_failed = clients - connections that connected;
 *   - percentiles are nearest-rank: exact from the sorted samples where the driver kept
 *     them (threads, strategies), otherwise the middle of the histogram bucket that holds
 *     the rank, within HIST_PRECISION of the exact value (histogram.h);
 *   - the measured window runs from measure_from_ns (the end of the warm-up; the gate
 *     without one) to the last reply, and exists only when that reply comes after its
 *     start and some exchange was measured; completed_rps = measured / the window, where
 *     measured = requests_ok - the warm-up's excluded exchanges;
 *   - the failure tally counts each kind under its own name; a kind past the
 *     MAX_FAILURE_KINDS-th is left out, never counted as another.
 */
#include "loadgen/loadgen.h"

#include "common/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------ counted as it runs */

void outcome_add_failure(struct failure_tally *t, int failure)
{
    pthread_mutex_lock(&t->lock);
    int i = 0;
    while (i < t->kinds && t->entry[i].failure != failure)
        i++;
    if (i == t->kinds && t->kinds < MAX_FAILURE_KINDS)
        t->entry[t->kinds++].failure = failure;
    if (i < t->kinds)
        t->entry[i].count++;
    pthread_mutex_unlock(&t->lock);
}

void outcome_init(struct outcome *out)
{
    memset(out, 0, sizeof *out);
    pthread_mutex_init(&out->failures.lock, NULL);
    pthread_mutex_init(&out->bad_failures.lock, NULL);
    atomic_init(&out->bad_reply_reported, false);
    hist_init(&out->corrected);
    hist_init(&out->uncorrected);
    hist_init(&out->connect);
    hist_init(&out->halves[0]);
    hist_init(&out->halves[1]);
    /* calloc: zero, as hist_init leaves a histogram, in mmap'd pages mapped when first
     * written: a part's twenty hold the pages its samples land in, not all 1.16 MiB. */
    if (!(out->batch = calloc(BATCHES, sizeof *out->batch)))
        die("out of memory for the latency batches");
    for (int b = 0; b < BATCHES; b++)
        out->batch[b].min = UINT64_MAX;
    hist_init(&out->lateness);
    out->due_in_window = -1;
    out->began_ns = out->ended_ns = now_ns();
}

void outcome_free(struct outcome *out)
{
    pthread_mutex_destroy(&out->failures.lock);
    pthread_mutex_destroy(&out->bad_failures.lock);
    free(out->exact_ns);
    out->exact_ns = NULL;
    free(out->batch);
    out->batch = NULL;
    free(out->parts);  /* each part was freed when it was added up */
    out->parts = NULL;
}

void outcome_note_bad_reply(struct outcome *out, long connection, const struct exchange *x)
{
    if (!atomic_exchange(&out->bad_reply_reported, true))
        warn("client %ld: bad reply: %s%s%.200s%s (further bad replies are only counted)",
             connection, x->why, x->bad_line ? ": '" : "", x->bad_line ? x->bad_line : "",
             x->bad_line ? "'" : "");
}

/* Connect times: 0.9 s and 2.9 s are the marks of one and of two or three SYN
 * retransmissions.  Linux's first SYN RTO is TCP_TIMEOUT_INIT, 1 s
 * (include/net/tcp.h); tcp_retransmit_timer() (net/ipv4/tcp_timer.c) then
 * doubles it, so without linear timeouts a connect whose SYN was dropped takes
 * about 1, 3, 7 ... s; since Linux 6.5 the first tcp_syn_linear_timeouts
 * retransmissions (sysctl, default 4) keep 1 s, so it takes about 1, 2, 3, 4,
 * 5, 7, 11 ... s.  Either way a 3 s connect fits under the default
 * --connect-timeout of 5 s (a 7 s one would not). */
void outcome_note_connect(struct outcome *out, uint64_t ns)
{
    hist_record(&out->connect, ns);
    if (ns >= 900000000ull)
        out->connects_over_1s++;
    if (ns >= 2900000000ull)
        out->connects_over_3s++;
}

/* ----------------------------------------------------------- percentiles */

/* Nearest-rank percentile of sorted samples, in microseconds. */
static double exact_percentile_us(const uint64_t *sorted, size_t n, double p)
{
    size_t rank = (size_t)ceil(p / 100.0 * (double)n);
    if (rank < 1)
        rank = 1;
    return (double)sorted[rank - 1] / 1e3;
}

static struct latency_summary exact_summary(const uint64_t *sorted, size_t n)
{
    struct latency_summary s = { 0 };
    if (n == 0)
        return s;
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += (double)sorted[i];
    s.p50 = exact_percentile_us(sorted, n, 50);
    s.p90 = exact_percentile_us(sorted, n, 90);
    s.p99 = exact_percentile_us(sorted, n, 99);
    s.p999 = exact_percentile_us(sorted, n, 99.9);
    s.max = (double)sorted[n - 1] / 1e3;
    s.mean = sum / (double)n / 1e3;
    s.samples = n;
    return s;
}

struct latency_summary outcome_histogram_summary(const struct histogram *h)
{
    struct latency_summary s = { 0 };
    if (h->total == 0)
        return s;
    s.p50 = (double)hist_percentile(h, 50) / 1e3;
    s.p90 = (double)hist_percentile(h, 90) / 1e3;
    s.p99 = (double)hist_percentile(h, 99) / 1e3;
    s.p999 = (double)hist_percentile(h, 99.9) / 1e3;
    s.max = (double)h->max / 1e3;
    s.mean = h->sum / (double)h->total / 1e3;
    s.samples = h->total;
    return s;
}

/* ----------------------------------------------------- the derived figures */

struct outcome_figures outcome_derive(const struct options *o, const struct outcome *out)
{
    struct outcome_figures f = { .open_loop = o->rate_rps > 0 };
    f.requests_failed = out->requests_planned - out->requests_ok;
    f.requests_not_sent = out->requests_planned - out->requests_sent;
    f.connections_failed = o->clients - out->connected;
    f.connections_opened = o->reconnect ? out->connections_opened : out->connected;
    f.all_ok = f.requests_failed == 0 && f.connections_failed == 0 && out->idle_failed == 0;
    f.elapsed_s = (double)(out->ended_ns - out->began_ns) / 1e9;
    f.has_throughput = f.elapsed_s > 0;
    f.throughput_rps = f.has_throughput ? (double)out->requests_ok / f.elapsed_s : 0;
    f.has_deadline = out->deadline_ns > 0 && out->first_send_ns > 0;
    f.run_deadline_s = f.has_deadline ? (double)(out->deadline_ns - out->first_send_ns) / 1e9 : 0;

    /* Measured: after the warm-up, up to the last reply. */
    f.measured = out->requests_ok - out->warmup_excluded;
    f.window = out->measure_from_ns > 0 && out->last_reply_ns > out->measure_from_ns && f.measured > 0;
    f.window_s = f.window ? (double)(out->last_reply_ns - out->measure_from_ns) / 1e9 : 0;
    f.completed_rps = f.window ? (double)f.measured / f.window_s : 0;

    /* Uploads: the bodies delivered, from the first request byte to the last reply. */
    f.moved = out->last_reply_ns > out->first_send_ns && out->first_send_ns > 0;
    f.transfer_s = f.moved ? (double)(out->last_reply_ns - out->first_send_ns) / 1e9 : 0;
    f.goodput_gbit_s = f.moved ? (double)out->body_bytes_ok * 8 / f.transfer_s / 1e9 : 0;
    f.has_server_reads_mean = o->service == SERVICE_SINK && out->requests_ok > 0;
    f.server_reads_mean = f.has_server_reads_mean ? (double)out->server_reads / (double)out->requests_ok : 0;

    /* Write strategies: per repetition of the body, over the exchanges completed. */
    long reps = out->requests_ok * o->repetitions;
    f.repetitions_done = reps;
    f.send_s = (double)out->send_ns / 1e9;
    f.send_gbit_s = f.send_s > 0 ? (double)out->body_bytes_ok * 8 / f.send_s / 1e9 : 0;
    f.write_calls_per_repetition = reps ? (double)out->write_calls / (double)reps : 0;
    f.data_segments_per_repetition = reps ? (double)out->data_segments_out / (double)reps : 0;
    f.server_reads_per_repetition = reps ? (double)out->server_reads / (double)reps : 0;

    /* Closed loop, every sample kept: the send is the intended start, both figures agree. */
    f.latency_exact = out->exact_ns != NULL;
    if (f.latency_exact) {
        f.latency = f.latency_uncorrected = exact_summary(out->exact_ns, out->exact_count);
    } else {
        f.latency = outcome_histogram_summary(&out->corrected);
        f.latency_uncorrected = outcome_histogram_summary(&out->uncorrected);
    }
    f.connect = outcome_histogram_summary(&out->connect);
    for (int b = 0; b < BATCHES; b++)
        f.batch_mean_us[b] = out->batch_count[b] ? out->batch_sum_ns[b] / (double)out->batch_count[b] / 1e3 : 0.0;
    return f;
}

struct part_shares outcome_part_shares(const struct outcome *part, double elapsed_s)
{
    struct part_shares s = {
        .has_busy = elapsed_s > 0,
        .has_waiting = elapsed_s > 0 && part->thread_waited_s >= 0,
    };
    s.busy = elapsed_s > 0 ? part->thread_cpu_s / elapsed_s : 0;
    s.waiting = elapsed_s > 0 ? part->thread_waited_s / elapsed_s : 0;
    return s;
}
