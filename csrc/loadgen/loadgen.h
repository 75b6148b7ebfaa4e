/* loadgen.h -- what the load generator's parts share.
 *
 *   loadgen.c     setup, main                  options.c   the flags, as a table
 *   threads.c     thread-per-connection driver events*.c   event-driven driver (epoll; events.h)
 *   strategies.c  how the request is written (many writes, writev, one write ...)
 *   exchange.c    one exchange, bytes only     histogram.c latencies in bounded memory
 *   outcome.c     the outcome's arithmetic     report.c    the JSON summary, printed
 *   arrivals.c    the open loop's schedule     batches.c   latencies by batch of the plan,
 *                                                          the open loop's own checks
 *
 * A driver runs the connections described by the options and fills in a struct outcome;
 * outcome_derive() computes the report's figures from it and report_print() prints them.
 * Both drivers fill in the same fields, so both print the same JSON keys.
 *
 * Names, as net_ in csrc/common and ev_ in csrc/loop (tests/layout/test_c_names.py holds them):
 * every function and variable a file defines for the other files begins with its room's
 * prefix below (what a file keeps static is its own), and every enum constant begins with
 * the first word of its enum's tag, in capitals (enum conn_phase: CONN_BUSY ...).
 *
 *   prefix                  files
 *   options_                options.c
 *   threads_                threads.c
 *   events_                 events.c, events_bad.c, events_reconnect.c, events_inflight.c
 *   strategy_               strategies.c
 *   exchange_, workload_    exchange.c
 *   outcome_                outcome.c
 *   report_                 report.c
 *   batches_                batches.c
 *   hist_                   histogram.c
 *   arrivals_               arrivals.c
 *   (main only)             loadgen.c
 */
#ifndef LOADGEN_H
#define LOADGEN_H

#include "common/net.h"
#include "loadgen/arrivals.h"
#include "loadgen/exchange.h"
#include "loadgen/histogram.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

enum engine { ENGINE_THREADS, ENGINE_EVENTS };
/* --strategy: how each repetition of the body is handed to the kernel (strategies.c). */
enum strategy { STRATEGY_NONE, STRATEGY_MANY, STRATEGY_WRITEV, STRATEGY_SINGLE, STRATEGY_MSG_MORE,
                STRATEGY_CORK };
extern const char *const strategy_names[];
/* --bad-kind: how the misbehaving connections of --bad N misbehave (events_bad.c). */
enum bad_kind { BAD_SILENT, BAD_SLOW, BAD_DRIP };
extern const char *const events_bad_kind_names[];
#define BAD_SLOW_READ 1024             /* slow: bytes read per --bad-interval, at most */
#define MAX_CONNECTING 512             /* events: connects in flight at once (all its threads) */
#define INFLIGHT_INTERVAL_NS 10000000ull /* events: in-flight sampling period (= its sweep) */
#define MAX_NBUFS 1024                 /* writev's IOV_MAX */
#define MAX_BUFSIZE 65536L
#define MAX_REPETITION_BYTES (1L << 20) /* nbufs x bufsize */
#define BATCHES 20                     /* batches of the plan, each with its mean latency (latency_batches) */

struct options {
    const char *host;
    long port;
    long clients;                  /* active connections */
    long requests;                 /* per connection; -1 when --duration is given */
    enum service service;
    long k;
    long size;
    double timeout_s;
    double connect_timeout_s;
    enum engine engine;
    long threads;                  /* events: event loops, each its own connections (--threads) */
    double rate_rps;               /* open loop: total requests/s; 0 = closed loop */
    double duration_s;             /* open loop: instead of --requests; 0 = not given */
    enum arrivals_kind arrivals;   /* open loop: even or Poisson gaps (arrivals.h) */
    double warmup_s;               /* leave out exchanges meant to start this early ... */
    long warmup_requests;          /* ... or the first this many to complete */
    bool reconnect;                /* events: a new connection per exchange (--reconnect) */
    long idle;                     /* extra connections held open and silent */
    long bad;                      /* extra misbehaving connections (--bad), connected first */
    enum bad_kind bad_kind;        /* ... silent, slow or drip */
    double bad_interval_s;         /* ... slow: a read, drip: a byte, every this often */
    enum vary_kind vary;           /* echo/sink: body sizes differ per connection */
    unsigned long seed;            /* ... drawn reproducibly from this seed */
    long spin_us;                  /* spin: the mean service time per request */
    enum spin_dist spin_dist;      /* ... fixed, or exponential */
    bool nodelay;                  /* TCP_NODELAY on every connection (the default) */
    enum strategy strategy;        /* sink: write each body this way (strategies.c) */
    long nbufs, bufsize, repetitions; /* ... as repetitions x nbufs buffers of bufsize bytes */
};

/* A failure is an errno value (> 0) or one of the protocol failures below,
 * which have names of their own in the report. */
enum fail_kind { FAIL_EOF = -1, FAIL_BADREPLY = -2 };

/* Failures by kind (failures are rare, so one lock is plenty). */
#define MAX_FAILURE_KINDS 64
struct failure_tally {
    pthread_mutex_t lock;
    int kinds;
    struct { int failure; long count; } entry[MAX_FAILURE_KINDS];
};

void outcome_add_failure(struct failure_tally *t, int failure);

/* What a driver measured. */
struct outcome {
    long connected;                /* active connections that connected */
    long lost;                     /* ... and then failed (RST, EOF, timeout, bad reply) */
    /* --reconnect: an active connection is a client slot, a connection per exchange;
     * connected counts the slots none of whose connects failed, lost those one of
     * whose connections failed once connected. */
    long connections_opened;       /* events: connects that succeeded for active exchanges */
    long requests_planned;         /* exchanges the run was to make */
    long requests_ok;
    long requests_sent;            /* exchanges begun (their first byte handed to send) */
    long server_reads;             /* sink: summed over the exchanges */
    long long body_bytes_ok;       /* echo/sink body bytes of the completed exchanges */
    long idle_ok, idle_failed;     /* idle connections held to the end, or not */
    long warmup_excluded;          /* exchanges left out of the latency figures */
    uint64_t began_ns, ended_ns;   /* first connect attempt .. last close */
    uint64_t first_send_ns;        /* the gate opened: the first request byte .. */
    uint64_t last_reply_ns;        /* .. the last complete reply (0: none) */
    long write_calls;              /* strategies: write-family system calls for the bodies */
    long head_write_calls;         /* ... and for request lines written on their own */
    uint64_t send_ns;              /* strategies: time spent writing, summed over exchanges */
    long segments_out, data_segments_out; /* strategies: TCP_INFO deltas; -1 unknown */
    long retransmitted_segments;   /* ... of them, retransmissions (tcpi_total_retrans) */
    struct failure_tally failures;
    atomic_bool bad_reply_reported;
    /* Latency from the intended start (open loop; = the send in closed
     * loop), and from the actual send. */
    struct histogram corrected, uncorrected;
    /* The corrected latencies again, of the exchanges in the first and in the second half
     * of the plan's measured part (as the batches below: g < N/2 is the first half): the report's histogram_halves, whose agreement says whether the run
     * was in a steady state (labkit.verdicts). */
    struct histogram halves[2];
    /* The corrected latencies once more, summed in BATCHES consecutive batches of the plan's
     * measured part (batches.c): the report's latency_batches.
     * A queue's waits are correlated, one request's with the next's, so the samples' own
     * standard deviation understates how far their mean may be off; the means of long
     * batches are nearly independent, and their spread bounds it (the batch-means method:
     * labkit.uncertainty.batch_means_interval). */
    double batch_sum_ns[BATCHES];
    uint64_t batch_count[BATCHES];
    /* ... and each batch's histogram, for its counts at or below the run's percentiles
     * (latency_batch_below): BATCHES of them, 1.16 MiB of address space, of which an events
     * part touches only the pages its samples land in. */
    struct histogram *batch;
    /* Open loop, persistent connections: how late the generator started each exchange whose
     * connection was free at its due time (sent - due; send_lateness_us). */
    struct histogram lateness;
    /* Open loop: exchanges of the plan due inside the measured window, sent or not (-1: not
     * counted; batches.c batches_note_due_in_window). */
    long due_in_window;
    /* The threads driver also keeps every sample, sorted, for exact
     * percentiles; NULL from the events driver. */
    uint64_t *exact_ns;
    size_t exact_count;
    /* The events driver with --threads: each thread's own counts and
     * histograms (already added up above), for the report's per_thread. */
    struct outcome *parts;
    long nparts;
    double thread_cpu_s;           /* a part: the CPU time its thread used */
    double thread_waited_s;        /* and the time it waited, runnable, for a CPU (-1: unknown) */
    /* The whole run, from just before the driver starts to just after it returns (every
     * connect, exchange and close; not the start-up or the report): wall and process CPU
     * time over the same window, so their ratio is the CPUs the generator used. */
    double window_wall_s, window_cpu_s;
    /* Connect times (connect() called .. established), every connection of the run that
     * connected: active, idle and bad ones. */
    struct histogram connect;
    long connects_over_1s, connects_over_3s; /* >= 0.9 s, >= 2.9 s: SYN retransmissions */
    /* Open loop: the run's deadline (the last exchange due + --timeout), and whether
     * it cut exchanges still unanswered (0: closed loop, no deadline). */
    uint64_t deadline_ns;
    bool deadline_hit;
    /* The measured window: from the end of the warm-up (the gate, without one) to the
     * last reply; completed_rps is the exchanges measured over it. */
    uint64_t measure_from_ns;
    /* Events: exchanges in flight, sampled once per INFLIGHT_INTERVAL_NS after the
     * warm-up (a part: its own sum, samples and max; the whole: the run's mean, the sum
     * of the threads' means). */
    double inflight_sum, inflight_mean;
    long inflight_samples, inflight_max;
    /* --bad: what became of the misbehaving connections (never failures of the run). */
    long bad_open_at_end, bad_closed_by_server, bad_failed_to_connect;
    long long bad_bytes_sent, bad_bytes_received;
    struct failure_tally bad_failures;
};

/* outcome.c: the counts as the run goes ... */
void outcome_init(struct outcome *out);
void outcome_free(struct outcome *out);
/* Quote the first bad reply on stderr; later ones are only counted. */
void outcome_note_bad_reply(struct outcome *out, long connection, const struct exchange *x);
/* One connect that succeeded after `ns` (not thread-safe: each thread its own outcome). */
void outcome_note_connect(struct outcome *out, uint64_t ns);

/* ... and what the report derives from them (outcome.c; report.c prints it). */
struct latency_summary {           /* microseconds; samples 0: none, every figure null */
    double p50, p90, p99, p999, max, mean;
    unsigned long long samples;
};
struct outcome_figures {           /* has_x (or a bool named for x) false: x was not measured */
    bool open_loop, all_ok;
    long requests_failed, requests_not_sent, connections_failed, connections_opened;
    double elapsed_s;
    bool has_throughput, has_deadline;
    double throughput_rps, run_deadline_s;
    long measured;                 /* exchanges after the warm-up: what completed_rps divides */
    bool window;                   /* a measured window: its length and rate */
    double window_s, completed_rps;
    bool moved;                    /* echo/sink: bodies delivered, first request byte .. last reply */
    double transfer_s, goodput_gbit_s;
    bool has_server_reads_mean;    /* sink: the server's reads per exchange */
    double server_reads_mean;
    long repetitions_done;         /* strategies: repetitions of the body, completed exchanges' */
    double send_s, send_gbit_s, write_calls_per_repetition, data_segments_per_repetition,
           server_reads_per_repetition;
    bool latency_exact;            /* from every sample kept, or from the histograms */
    struct latency_summary latency, latency_uncorrected, connect;
    double batch_mean_us[BATCHES]; /* a batch of 0 samples: 0 here, null in the report */
};
struct outcome_figures outcome_derive(const struct options *o, const struct outcome *out);
struct latency_summary outcome_histogram_summary(const struct histogram *h);
/* An events thread's CPU time and wait for a CPU, as shares of the run's elapsed time. */
struct part_shares {
    bool has_busy, has_waiting;    /* waiting: also false where the kernel did not say */
    double busy, waiting;
};
struct part_shares outcome_part_shares(const struct outcome *part, double elapsed_s);

/* One measured exchange's latency: exchange g (0-based) of the `planned` of the plan's
 * measured part, in the order of the plan (g = its index on its connection x clients + the
 * connection's, less batches_from). */
void batches_note_latency(struct outcome *out, long g, long planned, uint64_t corrected_ns,
                          uint64_t uncorrected_ns);
/* batches.c: a part's latency figures added into the whole; the exchanges of schedule `a`
 * (started at start_ns) due inside the measured window; the report's keys from them. */
void batches_add_latencies(struct outcome *into, const struct outcome *part);
/* The first exchange of the plan the batches count: where the warm-up ends, if known before
 * the run (batches.c). */
long batches_from(const struct options *o, const struct arrivals *a, long planned);
void batches_note_due_in_window(struct outcome *out, const struct arrivals *a, uint64_t start_ns);
void batches_print_below(const struct outcome *out);
void batches_print_open_loop(const struct options *o, const struct outcome *out, bool window);

/* options.c: the flags read and checked; a bad one, or a bad combination, ends the
 * process with exit EXIT_BAD_ARGS and a message on stderr (options_fail). */
#define EXIT_BAD_ARGS 2
struct options options_parse(int argc, char **argv);
_Noreturn void options_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
extern const char *const options_engine_names[];

/* The drivers: run the whole load, fill in *out. */
void threads_drive(const struct options *o, const struct net_addr *addr,
                   const struct workload *w, struct outcome *out);
void events_drive(const struct options *o, const struct net_addr *addr,
                  const struct workload *w, struct outcome *out);
void strategy_drive(const struct options *o, const struct net_addr *addr,
                    const struct workload *w, struct outcome *out);

/* Print the JSON summary on stdout and a line on stderr; returns the exit
 * code (0: everything succeeded, 1: something failed). */
int report_print(const struct options *o, struct outcome *out);

#endif
