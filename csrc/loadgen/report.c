/* report.c -- failures by name, and the one JSON summary on stdout.
 *
 * Latencies come from the exact samples when the driver kept them (threads)
 * and from the histogram otherwise (events); "latency_source" and
 * "percentile_precision" say which, so a reader knows how far to trust the
 * third digit.
 *
 * Keys the "what breaks first" experiment reads (both engines print every key;
 * null where a figure was not measured, never a 0 that was not counted):
 *   requests_sent, requests_not_sent  exchanges begun, and planned but never
 *       begun (their connection failed, or was still busy with earlier ones
 *       when an open-loop run reached its deadline); requests_failed =
 *       requests_planned - requests_ok, as before;
 *   run_deadline_s, ended_at_deadline  open loop: the last due time +
 *       --timeout, and whether exchanges were still unanswered then;
 *   completed_rps, measured_window_s  exchanges measured (after the warm-up)
 *       per second, from the end of the warm-up to the last reply;
 *   requests_measured  what completed_rps divides: requests_ok - warmup.excluded;
 *   requests_due_in_window, measured_window_ns  open loop: the schedule's
 *       exchanges due in the measured window (its start .. the last reply, both
 *       included), sent or not, and the window in ns after the first due time;
 *   send_lateness_us  open loop: {p50, p99, max, samples}, how late the
 *       generator started each exchange whose connection was free at its due
 *       time (one that waited for a reply is left out, and --reconnect's);
 *   latency_batches, latency_batch_below, latency_batch_under  the measured part of
 *       the plan in 20 batches: each one's [samples, mean us], and its samples at or
 *       below (under: below) the bucket of the run's p50, p90, p99, p999 (batches.c);
 *   inflight  events: {mean, max, samples, interval_ms, max_exact}, exchanges
 *       in flight sampled every 10 ms (events_inflight.c); null from the threads engine;
 *   connect_us, connect_histogram, connects_over_1s, connects_over_3s,
 *       connect_burst_limit, syn_linear_timeouts  connect times (see below);
 *   bad  --bad N: the misbehaving connections' fate; null without them;
 *   reconnect, connections_opened  whether each exchange had a connection of
 *       its own (--reconnect), and the connects that succeeded for the
 *       exchanges (without --reconnect: connections_ok, one per client).  With
 *       --reconnect, connections_ok/failed/lost count client slots: ok, none
 *       of its connects failed; failed (clients - ok), one of them did; lost,
 *       one of its connections failed once connected.  A failed connect is a
 *       failed exchange (requests_failed, errors by name), never the end of
 *       the slot.
 */
#include "loadgen/loadgen.h"

#include "common/util.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/* ---------------------------------------------------------- failure names */

static const char *failure_name(int failure, char buf[32])
{
    if (failure == FAIL_EOF)
        return "EOF";       /* the server closed before the reply was complete */
    if (failure == FAIL_BADREPLY)
        return "BADREPLY";  /* ERR, malformed or unexpected reply */
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 32))
    const char *name = strerrorname_np(failure);
    if (name)
        return name;
#else
    static const struct { int err; const char *name; } known[] = {
#define E(x) { x, #x }
        E(ECONNREFUSED), E(ECONNRESET), E(ECONNABORTED), E(ETIMEDOUT), E(EPIPE),
        E(EMFILE), E(ENFILE), E(EAGAIN), E(ENOMEM), E(ENOBUFS), E(EADDRNOTAVAIL),
        E(EADDRINUSE), E(ENETUNREACH), E(EHOSTUNREACH), E(EINVAL),
#undef E
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (known[i].err == failure)
            return known[i].name;
#endif
    snprintf(buf, 32, "errno_%d", failure);
    return buf;
}

void tally_add(struct failure_tally *t, int failure)
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

/* ---------------------------------------------------------------- outcome */

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

void note_bad_reply(struct outcome *out, long connection, const struct exchange *x)
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
void note_connect(struct outcome *out, uint64_t ns)
{
    hist_record(&out->connect, ns);
    if (ns >= 900000000ull)
        out->connects_over_1s++;
    if (ns >= 2900000000ull)
        out->connects_over_3s++;
}

/* ------------------------------------------------------------ the report */

const char *const bad_kind_names[] = { "silent", "slow", "drip" };

static const char *const engine_names[] = { "threads", "events" };

static void print_no_latency(const char *key)
{
    printf("\"%s\":{\"p50\":null,\"p90\":null,\"p99\":null,\"p999\":null,"
           "\"max\":null,\"mean\":null,\"samples\":0}", key);
}

/* Nearest-rank percentile of sorted samples, in microseconds. */
static double exact_percentile_us(const uint64_t *sorted, size_t n, double p)
{
    size_t rank = (size_t)ceil(p / 100.0 * (double)n);
    if (rank < 1)
        rank = 1;
    return (double)sorted[rank - 1] / 1e3;
}

static void print_exact_latency(const char *key, const uint64_t *sorted, size_t n)
{
    if (n == 0)
        { print_no_latency(key); return; }
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += (double)sorted[i];
    printf("\"%s\":{\"p50\":%.3f,\"p90\":%.3f,\"p99\":%.3f,\"p999\":%.3f,"
           "\"max\":%.3f,\"mean\":%.3f,\"samples\":%zu}", key,
           exact_percentile_us(sorted, n, 50), exact_percentile_us(sorted, n, 90),
           exact_percentile_us(sorted, n, 99), exact_percentile_us(sorted, n, 99.9),
           (double)sorted[n - 1] / 1e3, sum / (double)n / 1e3, n);
}

static void print_histogram_latency(const char *key, const struct histogram *h)
{
    if (h->total == 0)
        { print_no_latency(key); return; }
    printf("\"%s\":{\"p50\":%.3f,\"p90\":%.3f,\"p99\":%.3f,\"p999\":%.3f,"
           "\"max\":%.3f,\"mean\":%.3f,\"samples\":%llu}", key,
           (double)hist_percentile(h, 50) / 1e3, (double)hist_percentile(h, 90) / 1e3,
           (double)hist_percentile(h, 99) / 1e3, (double)hist_percentile(h, 99.9) / 1e3,
           (double)h->max / 1e3, h->sum / (double)h->total / 1e3,
           (unsigned long long)h->total);
}

/* The non-empty buckets only, as [[highest value in the bucket (us), count], ...]. */
static void print_buckets(const struct histogram *h)
{
    putchar('[');
    const char *sep = "";
    for (size_t b = 0; b < HIST_BUCKETS; b++) {
        if (h->count[b] == 0)
            continue;
        printf("%s[%.3f,%llu]", sep, (double)hist_bucket_high(b) / 1e3,
               (unsigned long long)h->count[b]);
        sep = ",";
    }
    putchar(']');
}

static void print_histogram_buckets(const struct histogram *h)
{
    printf("\"histogram\":");
    print_buckets(h);
}

static void print_optional(const char *key, bool given, double value);
static void print_optional_count(const char *key, bool given, long value);

/* Connect times, from the histogram: percentiles and the non-empty buckets as
 * [lowest, highest value in the bucket (us), count] (a bucket is under 1% wide). */
static void print_connects(const struct options *o, const struct outcome *out)
{
    const struct histogram *h = &out->connect;
    if (h->total == 0) {
        printf("\"connect_us\":{\"p50\":null,\"p90\":null,\"p99\":null,\"max\":null,\"mean\":null,"
               "\"samples\":0},");
    } else {
        printf("\"connect_us\":{\"p50\":%.3f,\"p90\":%.3f,\"p99\":%.3f,\"max\":%.3f,\"mean\":%.3f,"
               "\"samples\":%llu},",
               (double)hist_percentile(h, 50) / 1e3, (double)hist_percentile(h, 90) / 1e3,
               (double)hist_percentile(h, 99) / 1e3, (double)h->max / 1e3,
               h->sum / (double)h->total / 1e3, (unsigned long long)h->total);
    }
    printf("\"connect_histogram\":[");
    const char *sep = "";
    for (size_t b = 0; b < HIST_BUCKETS; b++) {
        if (h->count[b] == 0)
            continue;
        printf("%s[%.3f,%.3f,%llu]", sep, (double)hist_bucket_low(b) / 1e3,
               (double)hist_bucket_high(b) / 1e3, (unsigned long long)h->count[b]);
        sep = ",";
    }
    printf("],\"connects_over_1s\":%ld,\"connects_over_3s\":%ld,", out->connects_over_1s,
           out->connects_over_3s);
    /* The events engine staggers a burst: at most this many connects at once. */
    print_optional_count("connect_burst_limit", o->engine == ENGINE_EVENTS && o->strategy == STRATEGY_NONE,
                         MAX_CONNECTING);
    /* This network namespace's SYN retransmission schedule (null: a kernel without it). */
    long linear = -1;
    FILE *f = fopen("/proc/sys/net/ipv4/tcp_syn_linear_timeouts", "r");
    if (f) {
        if (fscanf(f, "%ld", &linear) != 1)
            linear = -1;
        fclose(f);
    }
    print_optional_count("syn_linear_timeouts", linear >= 0, linear);
}

static void print_errors_named(const char *key, const struct failure_tally *t);

/* Events: exchanges in flight; null from the drivers that do not sample. */
static void print_inflight(const struct options *o, const struct outcome *out)
{
    if (o->engine != ENGINE_EVENTS || o->strategy != STRATEGY_NONE) {
        printf("\"inflight\":null,");
        return;
    }
    printf("\"inflight\":{");
    print_optional("mean", out->inflight_samples > 0, out->inflight_mean);
    print_optional_count("max", out->inflight_samples > 0, out->inflight_max);
    printf("\"samples\":%ld,\"interval_ms\":%.0f,\"max_exact\":%s},", out->inflight_samples,
           (double)INFLIGHT_INTERVAL_NS / 1e6, o->threads == 1 ? "true" : "false");
}

/* --bad: what became of the misbehaving connections; null without them. */
static void print_bad(const struct options *o, const struct outcome *out)
{
    if (o->bad == 0) {
        printf("\"bad\":null,");
        return;
    }
    printf("\"bad\":{\"kind\":\"%s\",\"connections\":%ld,\"interval_s\":%.15g,\"open_at_end\":%ld,"
           "\"closed_by_server\":%ld,\"failed_to_connect\":%ld,\"bytes_sent\":%lld,\"bytes_received\":%lld,",
           bad_kind_names[o->bad_kind], o->bad, o->bad_interval_s, out->bad_open_at_end,
           out->bad_closed_by_server, out->bad_failed_to_connect, out->bad_bytes_sent, out->bad_bytes_received);
    print_errors_named("errors", &out->bad_failures);
    printf("},");
}

static void print_errors(const struct failure_tally *t)
{
    print_errors_named("errors", t);
}

static void print_errors_named(const char *key, const struct failure_tally *t)
{
    printf("\"%s\":{", key);
    for (int i = 0; i < t->kinds; i++) {
        char buf[32];
        printf("%s\"%s\":%ld", i ? "," : "", failure_name(t->entry[i].failure, buf),
               t->entry[i].count);
    }
    printf("}");
}

static void print_rusage(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("\"rusage\":{\"user_s\":%.6f,\"sys_s\":%.6f,\"voluntary_ctxt_switches\":%ld,"
           "\"involuntary_ctxt_switches\":%ld,\"minor_faults\":%ld,\"major_faults\":%ld,"
           "\"max_rss_kb\":%ld}",
           (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6,
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6,
           ru.ru_nvcsw, ru.ru_nivcsw, ru.ru_minflt, ru.ru_majflt, ru.ru_maxrss);
}

/* A number, or null when it was not given. */
static void print_optional(const char *key, bool given, double value)
{
    if (given)
        printf("\"%s\":%.15g,", key, value);
    else
        printf("\"%s\":null,", key);
}

/* A count (never in exponent form), or null when it was not given. */
static void print_optional_count(const char *key, bool given, long value)
{
    if (given)
        printf("\"%s\":%ld,", key, value);
    else
        printf("\"%s\":null,", key);
}

/* The events driver's threads, each: its exchanges, its CPU time and how busy
 * that kept it, how long it waited for a CPU (null: the kernel did not say),
 * its histogram (their sum is the one above). */
static void print_parts(const struct outcome *out, double elapsed)
{
    printf("\"per_thread\":[");
    for (long t = 0; t < out->nparts; t++) {
        const struct outcome *p = &out->parts[t];
        printf("%s{\"requests_ok\":%ld,\"connections_ok\":%ld,\"cpu_s\":%.6f,", t ? "," : "", p->requests_ok,
               p->connected, p->thread_cpu_s);
        print_optional("busy", elapsed > 0, elapsed > 0 ? p->thread_cpu_s / elapsed : 0);
        print_optional("waiting", elapsed > 0 && p->thread_waited_s >= 0,
                       elapsed > 0 ? p->thread_waited_s / elapsed : 0);
        print_histogram_buckets(&p->corrected);
        printf("}");
    }
    printf("],");
}

int report_outcome(const struct options *o, struct outcome *out)
{
    bool open_loop = o->rate_rps > 0;
    long requests_failed = out->requests_planned - out->requests_ok;
    long connections_failed = o->clients - out->connected;
    double elapsed = (double)(out->ended_ns - out->began_ns) / 1e9;

    printf("{\"service\":\"%s\",\"host\":\"%s\",\"port\":%ld,", service_names[o->service],
           o->host, o->port);
    printf("\"engine\":\"%s\",\"threads\":%ld,\"mode\":\"%s\",", engine_names[o->engine],
           o->threads, open_loop ? "open" : "closed");
    printf("\"clients\":%ld,", o->clients);
    print_optional_count("requests_per_client", o->requests >= 0, o->requests);
    print_optional("rate_rps", open_loop, o->rate_rps);
    print_optional("duration_s", o->duration_s > 0, o->duration_s);
    if (open_loop)
        printf("\"arrivals\":\"%s\",", arrival_kind_names[o->arrivals]);
    else
        printf("\"arrivals\":null,");
    if (o->service == SERVICE_TOP)
        printf("\"k\":%ld,\"size_bytes\":null,", o->k);
    else if (o->service == SERVICE_SPIN)
        printf("\"k\":null,\"size_bytes\":null,\"spin_us\":%ld,\"spin_dist\":\"%s\",", o->spin_us,
               spin_dist_names[o->spin_dist]);
    else
        printf("\"k\":null,\"size_bytes\":%ld,", o->size);
    printf("\"timeout_s\":%g,\"connect_timeout_s\":%g,", o->timeout_s, o->connect_timeout_s);
    printf("\"connections_ok\":%ld,\"connections_failed\":%ld,\"connections_lost\":%ld,",
           out->connected, connections_failed, out->lost);
    printf("\"reconnect\":%s,\"connections_opened\":%ld,", o->reconnect ? "true" : "false",
           o->reconnect ? out->connections_opened : out->connected);
    printf("\"idle_connections\":%ld,\"idle_connections_ok\":%ld,"
           "\"idle_connections_failed\":%ld,", o->idle, out->idle_ok, out->idle_failed);
    printf("\"requests_planned\":%ld,\"requests_ok\":%ld,\"requests_failed\":%ld,",
           out->requests_planned, out->requests_ok, requests_failed);
    printf("\"requests_sent\":%ld,\"requests_not_sent\":%ld,", out->requests_sent,
           out->requests_planned - out->requests_sent);
    bool deadline = out->deadline_ns > 0 && out->first_send_ns > 0;
    print_optional("run_deadline_s", deadline,
                   deadline ? (double)(out->deadline_ns - out->first_send_ns) / 1e9 : 0);
    printf("\"ended_at_deadline\":%s,", out->deadline_hit ? "true" : "false");
    printf("\"warmup\":{");
    print_optional("seconds", o->warmup_s > 0, o->warmup_s);
    print_optional_count("requests", o->warmup_requests > 0, o->warmup_requests);
    printf("\"excluded\":%ld},", out->warmup_excluded);
    printf("\"elapsed_s\":%.6f,", elapsed);
    if (elapsed > 0)
        printf("\"throughput_rps\":%.3f,", (double)out->requests_ok / elapsed);
    else
        printf("\"throughput_rps\":null,");
    /* Measured: after the warm-up, up to the last reply. */
    long measured = out->requests_ok - out->warmup_excluded;
    bool window = out->measure_from_ns > 0 && out->last_reply_ns > out->measure_from_ns && measured > 0;
    double window_s = window ? (double)(out->last_reply_ns - out->measure_from_ns) / 1e9 : 0;
    print_optional("measured_window_s", window, window_s);
    print_optional("completed_rps", window, window ? (double)measured / window_s : 0);
    printf("\"requests_measured\":%ld,", measured);
    print_open_loop_checks(o, out, window);
    print_inflight(o, out);
    print_connects(o, out);
    print_bad(o, out);
    if (o->service == SERVICE_ECHO || o->service == SERVICE_SINK) {
        /* Uploads: the bodies delivered, from the first request byte to the last reply. */
        printf("\"vary\":\"%s\",\"seed\":%lu,\"body_bytes_ok\":%lld,", vary_names[o->vary],
               o->seed, out->body_bytes_ok);
        bool moved = out->last_reply_ns > out->first_send_ns && out->first_send_ns > 0;
        double transfer = moved ? (double)(out->last_reply_ns - out->first_send_ns) / 1e9 : 0;
        print_optional("transfer_s", moved, transfer);
        print_optional("goodput_gbit_s", moved, moved ? (double)out->body_bytes_ok * 8 / transfer / 1e9 : 0);
    }
    if (o->strategy != STRATEGY_NONE) {
        /* Seed 004's figures, and the counts that explain them. */
        long reps = out->requests_ok * o->repetitions;
        printf("\"strategy\":\"%s\",\"nbufs\":%ld,\"bufsize\":%ld,\"repetitions\":%ld,\"nodelay\":%s,",
               strategy_names[o->strategy], o->nbufs, o->bufsize, o->repetitions, o->nodelay ? "true" : "false");
        double send_s = (double)out->send_ns / 1e9;
        print_optional("send_s", out->requests_ok > 0, send_s);
        print_optional("send_gbit_s", send_s > 0, send_s > 0 ? (double)out->body_bytes_ok * 8 / send_s / 1e9 : 0);
        printf("\"write_calls\":%ld,\"head_write_calls\":%ld,", out->write_calls, out->head_write_calls);
        print_optional("write_calls_per_repetition", reps > 0, reps ? (double)out->write_calls / (double)reps : 0);
        print_optional_count("segments_out", out->segments_out >= 0, out->segments_out);
        print_optional_count("data_segments_out", out->data_segments_out >= 0, out->data_segments_out);
        print_optional_count("retransmitted_segments", out->retransmitted_segments >= 0,
                             out->retransmitted_segments);
        print_optional("data_segments_per_repetition", reps > 0 && out->data_segments_out >= 0,
                       reps ? (double)out->data_segments_out / (double)reps : 0);
        print_optional("server_reads_per_repetition", reps > 0, reps ? (double)out->server_reads / (double)reps : 0);
    }
    printf("\"nodelay_on\":%s,", o->nodelay ? "true" : "false");
    if (o->service == SERVICE_SINK && out->requests_ok > 0)
        printf("\"sink_server_reads_mean\":%.3f,",
               (double)out->server_reads / (double)out->requests_ok);
    if (out->exact_ns) {
        /* Closed loop only: the send is the intended start, both figures agree. */
        printf("\"latency_source\":\"exact\",\"percentile_precision\":0,");
        print_exact_latency("latency_us", out->exact_ns, out->exact_count);
        putchar(',');
        print_exact_latency("latency_uncorrected_us", out->exact_ns, out->exact_count);
    } else {
        printf("\"latency_source\":\"histogram\",\"percentile_precision\":%.4f,",
               HIST_PRECISION);
        print_histogram_latency("latency_us", &out->corrected);
        putchar(',');
        print_histogram_latency("latency_uncorrected_us", &out->uncorrected);
    }
    putchar(',');
    print_histogram_buckets(&out->corrected);
    printf(",\"histogram_halves\":[");
    print_buckets(&out->halves[0]);
    putchar(',');
    print_buckets(&out->halves[1]);
    printf("],\"latency_batches\":[");  /* [samples, mean (us)] of each batch, in the plan's order */
    for (int b = 0; b < BATCHES; b++)
        printf(out->batch_count[b] ? "%s[%llu,%.3f]" : "%s[0,null]", b ? "," : "",
               (unsigned long long)out->batch_count[b],
               out->batch_count[b] ? out->batch_sum_ns[b] / (double)out->batch_count[b] / 1e3 : 0.0);
    printf("],");
    print_batch_below(out);
    print_parts(out, elapsed);
    print_errors(&out->failures);
    printf(",\"window\":{\"wall_s\":%.6f,\"cpu_s\":%.6f},", out->window_wall_s, out->window_cpu_s);
    print_rusage();
    printf("}\n");
    fflush(stdout);

    if (o->bad)
        warn("%ld bad connections (%s): %ld open at the end, %ld closed by the server, %ld failed to connect",
             o->bad, bad_kind_names[o->bad_kind], out->bad_open_at_end, out->bad_closed_by_server,
             out->bad_failed_to_connect);
    warn("%ld clients (+%ld idle) x %ld requests (%s, %s engine, %ld thread%s, %s loop): %ld ok, %ld failed, "
         "%ld connections failed, %ld lost, %.3f s", o->clients, o->idle,
         o->clients ? out->requests_planned / o->clients : 0, service_names[o->service],
         engine_names[o->engine], o->threads, o->threads == 1 ? "" : "s", open_loop ? "open" : "closed",
         out->requests_ok,
         requests_failed, connections_failed, out->lost, elapsed);
    bool all_ok = requests_failed == 0 && connections_failed == 0 && out->idle_failed == 0;
    return all_ok ? 0 : 1;
}
