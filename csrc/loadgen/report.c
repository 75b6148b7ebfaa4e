/* report.c -- the one JSON summary on stdout, and its line on stderr.  It prints what
 * outcome.c derived and computes nothing of its own.
 *
 * Invariants:
 *   - stdout gets exactly one JSON object, on one line, its keys in a fixed order;
 *   - both engines (and the strategies driver) print every key; null where a figure was
 *     not measured, never a 0 that was not counted;
 *   - latencies come from the exact samples when the driver kept them (threads) and from
 *     the histogram otherwise (events); "latency_source" and "percentile_precision" say
 *     which, so a reader knows how far to trust the third digit;
 *   - a failure is named by its errno's name (ECONNRESET ...), or EOF and BADREPLY.
 *
 * Keys the "what breaks first" experiment reads:
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
#include <stdio.h>
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

/* ------------------------------------------------------------ the pieces */

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

static void print_latency(const char *key, const struct latency_summary *s)
{
    if (s->samples == 0) {
        printf("\"%s\":{\"p50\":null,\"p90\":null,\"p99\":null,\"p999\":null,"
               "\"max\":null,\"mean\":null,\"samples\":0}", key);
        return;
    }
    printf("\"%s\":{\"p50\":%.3f,\"p90\":%.3f,\"p99\":%.3f,\"p999\":%.3f,"
           "\"max\":%.3f,\"mean\":%.3f,\"samples\":%llu}", key,
           s->p50, s->p90, s->p99, s->p999, s->max, s->mean, s->samples);
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

/* ---------------------------------------------------------- the sections */

/* Connect times, from the histogram: percentiles and the non-empty buckets as
 * [lowest, highest value in the bucket (us), count] (a bucket is under 1% wide). */
static void print_connects(const struct options *o, const struct outcome *out, const struct outcome_figures *f)
{
    const struct histogram *h = &out->connect;
    const struct latency_summary *s = &f->connect;
    if (s->samples == 0) {
        printf("\"connect_us\":{\"p50\":null,\"p90\":null,\"p99\":null,\"max\":null,\"mean\":null,"
               "\"samples\":0},");
    } else {
        printf("\"connect_us\":{\"p50\":%.3f,\"p90\":%.3f,\"p99\":%.3f,\"max\":%.3f,\"mean\":%.3f,"
               "\"samples\":%llu},", s->p50, s->p90, s->p99, s->max, s->mean, s->samples);
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
    FILE *file = fopen("/proc/sys/net/ipv4/tcp_syn_linear_timeouts", "r");
    if (file) {
        if (fscanf(file, "%ld", &linear) != 1)
            linear = -1;
        fclose(file);
    }
    print_optional_count("syn_linear_timeouts", linear >= 0, linear);
}

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
           events_bad_kind_names[o->bad_kind], o->bad, o->bad_interval_s, out->bad_open_at_end,
           out->bad_closed_by_server, out->bad_failed_to_connect, out->bad_bytes_sent, out->bad_bytes_received);
    print_errors_named("errors", &out->bad_failures);
    printf("},");
}

/* Seed 004's figures, and the counts that explain them. */
static void print_strategy(const struct options *o, const struct outcome *out, const struct outcome_figures *f)
{
    long reps = f->repetitions_done;
    printf("\"strategy\":\"%s\",\"nbufs\":%ld,\"bufsize\":%ld,\"repetitions\":%ld,\"nodelay\":%s,",
           strategy_names[o->strategy], o->nbufs, o->bufsize, o->repetitions, o->nodelay ? "true" : "false");
    print_optional("send_s", out->requests_ok > 0, f->send_s);
    print_optional("send_gbit_s", f->send_s > 0, f->send_gbit_s);
    printf("\"write_calls\":%ld,\"head_write_calls\":%ld,", out->write_calls, out->head_write_calls);
    print_optional("write_calls_per_repetition", reps > 0, f->write_calls_per_repetition);
    print_optional_count("segments_out", out->segments_out >= 0, out->segments_out);
    print_optional_count("data_segments_out", out->data_segments_out >= 0, out->data_segments_out);
    print_optional_count("retransmitted_segments", out->retransmitted_segments >= 0,
                         out->retransmitted_segments);
    print_optional("data_segments_per_repetition", reps > 0 && out->data_segments_out >= 0,
                   f->data_segments_per_repetition);
    print_optional("server_reads_per_repetition", reps > 0, f->server_reads_per_repetition);
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

/* The events driver's threads, each: its exchanges, its CPU time and how busy
 * that kept it, how long it waited for a CPU (null: the kernel did not say),
 * its histogram (their sum is the one above). */
static void print_parts(const struct outcome *out, double elapsed)
{
    printf("\"per_thread\":[");
    for (long t = 0; t < out->nparts; t++) {
        const struct outcome *p = &out->parts[t];
        struct part_shares share = outcome_part_shares(p, elapsed);
        printf("%s{\"requests_ok\":%ld,\"connections_ok\":%ld,\"cpu_s\":%.6f,", t ? "," : "", p->requests_ok,
               p->connected, p->thread_cpu_s);
        print_optional("busy", share.has_busy, share.busy);
        print_optional("waiting", share.has_waiting, share.waiting);
        print_histogram_buckets(&p->corrected);
        printf("}");
    }
    printf("],");
}

/* ------------------------------------------------------------ the report */

int report_print(const struct options *o, struct outcome *out)
{
    struct outcome_figures f = outcome_derive(o, out);

    printf("{\"service\":\"%s\",\"host\":\"%s\",\"port\":%ld,", workload_service_names[o->service],
           o->host, o->port);
    printf("\"engine\":\"%s\",\"threads\":%ld,\"mode\":\"%s\",", options_engine_names[o->engine],
           o->threads, f.open_loop ? "open" : "closed");
    printf("\"clients\":%ld,", o->clients);
    print_optional_count("requests_per_client", o->requests >= 0, o->requests);
    print_optional("rate_rps", f.open_loop, o->rate_rps);
    print_optional("duration_s", o->duration_s > 0, o->duration_s);
    if (f.open_loop)
        printf("\"arrivals\":\"%s\",", arrivals_kind_names[o->arrivals]);
    else
        printf("\"arrivals\":null,");
    if (o->service == SERVICE_TOP)
        printf("\"k\":%ld,\"size_bytes\":null,", o->k);
    else if (o->service == SERVICE_SPIN)
        printf("\"k\":null,\"size_bytes\":null,\"spin_us\":%ld,\"spin_dist\":\"%s\",", o->spin_us,
               workload_spin_dist_names[o->spin_dist]);
    else
        printf("\"k\":null,\"size_bytes\":%ld,", o->size);
    printf("\"timeout_s\":%g,\"connect_timeout_s\":%g,", o->timeout_s, o->connect_timeout_s);
    printf("\"connections_ok\":%ld,\"connections_failed\":%ld,\"connections_lost\":%ld,",
           out->connected, f.connections_failed, out->lost);
    printf("\"reconnect\":%s,\"connections_opened\":%ld,", o->reconnect ? "true" : "false",
           f.connections_opened);
    printf("\"idle_connections\":%ld,\"idle_connections_ok\":%ld,"
           "\"idle_connections_failed\":%ld,", o->idle, out->idle_ok, out->idle_failed);
    printf("\"requests_planned\":%ld,\"requests_ok\":%ld,\"requests_failed\":%ld,",
           out->requests_planned, out->requests_ok, f.requests_failed);
    printf("\"requests_sent\":%ld,\"requests_not_sent\":%ld,", out->requests_sent, f.requests_not_sent);
    print_optional("run_deadline_s", f.has_deadline, f.run_deadline_s);
    printf("\"ended_at_deadline\":%s,", out->deadline_hit ? "true" : "false");
    printf("\"warmup\":{");
    print_optional("seconds", o->warmup_s > 0, o->warmup_s);
    print_optional_count("requests", o->warmup_requests > 0, o->warmup_requests);
    printf("\"excluded\":%ld},", out->warmup_excluded);
    printf("\"elapsed_s\":%.6f,", f.elapsed_s);
    if (f.has_throughput)
        printf("\"throughput_rps\":%.3f,", f.throughput_rps);
    else
        printf("\"throughput_rps\":null,");
    print_optional("measured_window_s", f.window, f.window_s);
    print_optional("completed_rps", f.window, f.completed_rps);
    printf("\"requests_measured\":%ld,", f.measured);
    batches_print_open_loop(o, out, f.window);
    print_inflight(o, out);
    print_connects(o, out, &f);
    print_bad(o, out);
    if (o->service == SERVICE_ECHO || o->service == SERVICE_SINK) {
        printf("\"vary\":\"%s\",\"seed\":%lu,\"body_bytes_ok\":%lld,", workload_vary_names[o->vary],
               o->seed, out->body_bytes_ok);
        print_optional("transfer_s", f.moved, f.transfer_s);
        print_optional("goodput_gbit_s", f.moved, f.goodput_gbit_s);
    }
    if (o->strategy != STRATEGY_NONE)
        print_strategy(o, out, &f);
    printf("\"nodelay_on\":%s,", o->nodelay ? "true" : "false");
    if (f.has_server_reads_mean)
        printf("\"sink_server_reads_mean\":%.3f,", f.server_reads_mean);
    if (f.latency_exact)
        printf("\"latency_source\":\"exact\",\"percentile_precision\":0,");
    else
        printf("\"latency_source\":\"histogram\",\"percentile_precision\":%.4f,", HIST_PRECISION);
    print_latency("latency_us", &f.latency);
    putchar(',');
    print_latency("latency_uncorrected_us", &f.latency_uncorrected);
    putchar(',');
    print_histogram_buckets(&out->corrected);
    printf(",\"histogram_halves\":[");
    print_buckets(&out->halves[0]);
    putchar(',');
    print_buckets(&out->halves[1]);
    printf("],\"latency_batches\":[");  /* [samples, mean (us)] of each batch, in the plan's order */
    for (int b = 0; b < BATCHES; b++)
        printf(out->batch_count[b] ? "%s[%llu,%.3f]" : "%s[0,null]", b ? "," : "",
               (unsigned long long)out->batch_count[b], f.batch_mean_us[b]);
    printf("],");
    batches_print_below(out);
    print_parts(out, f.elapsed_s);
    print_errors_named("errors", &out->failures);
    printf(",\"window\":{\"wall_s\":%.6f,\"cpu_s\":%.6f},", out->window_wall_s, out->window_cpu_s);
    print_rusage();
    printf("}\n");
    fflush(stdout);

    if (o->bad)
        warn("%ld bad connections (%s): %ld open at the end, %ld closed by the server, %ld failed to connect",
             o->bad, events_bad_kind_names[o->bad_kind], out->bad_open_at_end, out->bad_closed_by_server,
             out->bad_failed_to_connect);
    warn("%ld clients (+%ld idle) x %ld requests (%s, %s engine, %ld thread%s, %s loop): %ld ok, %ld failed, "
         "%ld connections failed, %ld lost, %.3f s", o->clients, o->idle,
         o->clients ? out->requests_planned / o->clients : 0, workload_service_names[o->service],
         options_engine_names[o->engine], o->threads, o->threads == 1 ? "" : "s", f.open_loop ? "open" : "closed",
         out->requests_ok, f.requests_failed, f.connections_failed, out->lost, f.elapsed_s);
    return f.all_ok ? 0 : 1;
}
