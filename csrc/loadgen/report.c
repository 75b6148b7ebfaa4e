/* report.c -- failures by name, and the one JSON summary on stdout.
 *
 * Latencies come from the exact samples when the driver kept them (threads)
 * and from the histogram otherwise (events); "latency_source" and
 * "percentile_precision" say which, so a reader knows how far to trust the
 * third digit.
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
    atomic_init(&out->bad_reply_reported, false);
    hist_init(&out->corrected);
    hist_init(&out->uncorrected);
    out->began_ns = out->ended_ns = now_ns();
}

void outcome_free(struct outcome *out)
{
    pthread_mutex_destroy(&out->failures.lock);
    free(out->exact_ns);
    out->exact_ns = NULL;
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

/* ------------------------------------------------------------ the report */

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

/* The non-empty buckets only, as [highest value in the bucket (us), count]. */
static void print_histogram_buckets(const struct histogram *h)
{
    printf("\"histogram\":[");
    const char *sep = "";
    for (size_t b = 0; b < HIST_BUCKETS; b++) {
        if (h->count[b] == 0)
            continue;
        printf("%s[%.3f,%llu]", sep, (double)hist_bucket_high(b) / 1e3,
               (unsigned long long)h->count[b]);
        sep = ",";
    }
    printf("]");
}

static void print_errors(const struct failure_tally *t)
{
    printf("\"errors\":{");
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
 * that kept it, its histogram (their sum is the one above). */
static void print_parts(const struct outcome *out, double elapsed)
{
    printf("\"per_thread\":[");
    for (long t = 0; t < out->nparts; t++) {
        const struct outcome *p = &out->parts[t];
        printf("%s{\"requests_ok\":%ld,\"connections_ok\":%ld,\"cpu_s\":%.6f,", t ? "," : "", p->requests_ok,
               p->connected, p->thread_cpu_s);
        print_optional("busy", elapsed > 0, elapsed > 0 ? p->thread_cpu_s / elapsed : 0);
        print_histogram_buckets(&p->corrected);
        printf("}");
    }
    printf("],");
}

int report(const struct options *o, struct outcome *out)
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
    if (o->service == SERVICE_TOP)
        printf("\"k\":%ld,\"size_bytes\":null,", o->k);
    else
        printf("\"k\":null,\"size_bytes\":%ld,", o->size);
    printf("\"timeout_s\":%g,\"connect_timeout_s\":%g,", o->timeout_s, o->connect_timeout_s);
    printf("\"connections_ok\":%ld,\"connections_failed\":%ld,\"connections_lost\":%ld,",
           out->connected, connections_failed, out->lost);
    printf("\"idle_connections\":%ld,\"idle_connections_ok\":%ld,"
           "\"idle_connections_failed\":%ld,", o->idle, out->idle_ok, out->idle_failed);
    printf("\"requests_planned\":%ld,\"requests_ok\":%ld,\"requests_failed\":%ld,",
           out->requests_planned, out->requests_ok, requests_failed);
    printf("\"warmup\":{");
    print_optional("seconds", o->warmup_s > 0, o->warmup_s);
    print_optional_count("requests", o->warmup_requests > 0, o->warmup_requests);
    printf("\"excluded\":%ld},", out->warmup_excluded);
    printf("\"elapsed_s\":%.6f,", elapsed);
    if (elapsed > 0)
        printf("\"throughput_rps\":%.3f,", (double)out->requests_ok / elapsed);
    else
        printf("\"throughput_rps\":null,");
    if (o->service != SERVICE_TOP) {
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
    putchar(',');
    print_parts(out, elapsed);
    print_errors(&out->failures);
    printf(",\"window\":{\"wall_s\":%.6f,\"cpu_s\":%.6f},", out->window_wall_s, out->window_cpu_s);
    print_rusage();
    printf("}\n");
    fflush(stdout);

    warn("%ld clients (+%ld idle) x %ld requests (%s, %s engine, %ld thread%s, %s loop): %ld ok, %ld failed, "
         "%ld connections failed, %ld lost, %.3f s", o->clients, o->idle,
         o->clients ? out->requests_planned / o->clients : 0, service_names[o->service],
         engine_names[o->engine], o->threads, o->threads == 1 ? "" : "s", open_loop ? "open" : "closed",
         out->requests_ok,
         requests_failed, connections_failed, out->lost, elapsed);
    bool all_ok = requests_failed == 0 && connections_failed == 0 && out->idle_failed == 0;
    return all_ok ? 0 : 1;
}
