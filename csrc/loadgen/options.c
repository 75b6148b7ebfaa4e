/* options.c -- the load generator's flags: one row of `flags` per flag drives
 * getopt_long's array, the --help text, the parsing of a value and --describe.
 *
 * Invariants:
 *   - a flag's bounds are written once, in its row: the parsing checks a value against
 *     them and --describe prints them (labkit checks what a student types against those);
 *   - a flag's value is checked where it is read, in the order given, and the first bad one
 *     ends the run: exit 2 (EXIT_BAD_ARGS) with a message that names the flag and what it
 *     expects, then "run 'loadgen --help' for the options"; nothing is connected before;
 *   - the rules between flags (how long to run, what needs --engine events, --strategy's
 *     shape, the spin service's own flags) are checked after every flag is read, each in a
 *     short function of its own below the table, in a fixed order;
 *   - no flag has a one-letter form: a row's letter is only getopt_long's answer for it.
 */
#include "loadgen/loadgen.h"

#include "common/util.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <sched.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_CLIENTS 100000L
#define MAX_REQUESTS 10000000L
#define MAX_SAMPLES 20000000L          /* threads: N x R latencies kept, 160 MB at most */
#define MAX_SIZE (256L * 1024 * 1024)  /* echo/sink payload per request */
#define MAX_RATE 10000000.0            /* open loop: total requests per second */
#define MAX_SECONDS 3600.0             /* --timeout, --connect-timeout, --duration, --warmup Ns */
#define MAX_THREADS 1024               /* events: event loops */

const char *const options_engine_names[] = { "threads", "events" };
static const char *const on_off_names[] = { "on", "off" };

/* ------------------------------------------------------------ the table */

enum arg_kind {
    ARG_SWITCH,     /* no value: sets a bool */
    ARG_TEXT,       /* kept as given */
    ARG_COUNT,      /* a whole number from min to max, into a long */
    ARG_SEED,       /* the same, into an unsigned long */
    ARG_POSITIVE,   /* a number more than 0 and at most `most`, in `unit`s, into a double */
    ARG_CHOICE,     /* one of names[first .. first + count), its index into an enum */
    ARG_ON_OFF,     /* on or off, into a bool */
    ARG_OWN,        /* read by the row's own function */
    ARG_ACTION,     /* no value: the row's own function runs (and exits) */
};

/* What a flag given says about the others (checked once all are read). */
enum need_kind { NEED_NOTHING, NEED_EVENTS, NEED_SPIN, NEED_RATE, NEED_KINDS };

struct flag {
    const char *name;              /* --name */
    char letter;                   /* getopt_long's answer for it */
    enum arg_kind kind;
    size_t at;                     /* where the value goes: offsetof(struct options, ...) */
    long min, max;                 /* count, seed: the bounds */
    double most;                   /* positive: the bound above */
    const char *unit;              /* positive: what the number counts, for the message */
    const char *const *names;      /* choice: the words, from names[first], count of them */
    int first, count;
    enum need_kind needs;
    void (*read)(const char *text, struct options *o);  /* ARG_OWN, ARG_ACTION */
    const char *section;           /* --help: a heading printed before this row */
    const char *usage;             /* --help: the flag as shown (NULL: not listed) ... */
    const char *help;              /* ... and its lines of help, '\n' between them */
};

static void read_warmup(const char *text, struct options *o), read_shape(const char *text, struct options *o);
static void read_help(const char *text, struct options *o), read_describe(const char *text, struct options *o);

#define AT(field) .at = offsetof(struct options, field)
#define COUNT(lo, hi) .kind = ARG_COUNT, .min = (lo), .max = (hi)
#define SECONDS(hi) .kind = ARG_POSITIVE, .most = (hi), .unit = "seconds"
#define CHOICE(words, from, n) .kind = ARG_CHOICE, .names = (words), .first = (from), .count = (n)

/* In the order --help lists them; those it does not list (usage NULL) last. */
static const struct flag flags[] = {
    { "host", 'H', ARG_TEXT, AT(host), .usage = "--host H",
      .help = "server address (default 127.0.0.1; ::1 works)" },
    { "service", 's', AT(service), CHOICE(workload_service_names, SERVICE_TOP, 4),
      .usage = "--service top|echo|sink|spin", .help = "workload (default top)" },
    { "k", 'k', AT(k), COUNT(1, 1000), .usage = "--k K",
      .help = "top: processes per reply, 1..1000 (default 2)" },
    { "size", 'b', AT(size), COUNT(1, MAX_SIZE), .usage = "--size BYTES",
      .help = "echo/sink: payload per request (default 64)" },
    { "vary", 'v', AT(vary), CHOICE(workload_vary_names, VARY_NONE, 3), .usage = "--vary none|uniform|log",
      .help = "echo/sink: each connection's payload size drawn from\n"
              "1024..--size, uniformly or log-uniformly (uploads);\n"
              "none (the default): every payload is --size bytes" },
    { "seed", 'S', ARG_SEED, AT(seed), .min = 0, .max = LONG_MAX, .usage = "--seed N",
      .help = "the draw's seed: the same seed, the same sizes (default 1)" },
    { "spin-us", 'u', AT(spin_us), COUNT(0, SPIN_MAX_US), .needs = NEED_SPIN, .usage = "--spin-us US",
      .help = "spin: each request keeps the server busy US microseconds on\n"
              "average, 0..1000000 (default 0: the loop's own cost)" },
    { "spin-dist", 'U', AT(spin_dist), CHOICE(workload_spin_dist_names, SPIN_FIXED, 2), .needs = NEED_SPIN,
      .usage = "--spin-dist fixed|exp",
      .help = "spin: every request US (default), or each drawn from the\n"
              "exponential distribution of mean US (from --seed)" },
    { "nodelay", 'N', ARG_ON_OFF, AT(nodelay), .names = on_off_names, .first = 0, .count = 2,
      .usage = "--nodelay on|off", .help = "TCP_NODELAY on each connection (default on; off: Nagle)" },
    { "timeout", 't', AT(timeout_s), SECONDS(MAX_SECONDS), .usage = "--timeout S",
      .help = "bound on each exchange, seconds (default 10);\n"
              "behind an iterative server a client waits for\n"
              "all earlier clients, so raise it for big sweeps" },
    { "connect-timeout", 'T', AT(connect_timeout_s), SECONDS(MAX_SECONDS), .usage = "--connect-timeout S",
      .help = "bound on each connect, seconds (default 5)" },
    { "engine", 'e', AT(engine), CHOICE(options_engine_names, ENGINE_THREADS, 2),
      .usage = "--engine threads|events",
      .help = "one thread per connection (default), or one\n"
              "event-driven thread (epoll) for many connections" },
    { "describe", 'D', ARG_ACTION, .read = read_describe, .usage = "--describe",
      .help = "print the flags' limits as JSON, and exit" },
    { "strategy", 'W', AT(strategy), CHOICE(strategy_names, STRATEGY_MANY, 5),
      .section = "write strategies (sink; one blocking connection per client, seed 004):",
      .usage = "--strategy S",
      .help = "how each repetition is written: many (a write per buffer),\n"
              "writev (one writev), single (copied, one write), msg_more\n"
              "(MSG_MORE on all but the last), cork (TCP_CORK around them)" },
    { "nbufs", 'n', AT(nbufs), COUNT(1, MAX_NBUFS), .usage = "--nbufs N --bufsize B",
      .help = "a repetition is N buffers of B bytes (N <= 1024, B <= 65536,\n"
              "N x B <= 1 MiB); --shape NxB says both at once" },
    { "repetitions", 'P', AT(repetitions), COUNT(1, MAX_REQUESTS), .usage = "--repetitions R",
      .help = "repetitions per request (default 1); the body is R x N x B" },
    { "threads", 'j', AT(threads), COUNT(1, MAX_THREADS), .needs = NEED_EVENTS,
      .section = "events engine only:", .usage = "--threads N",
      .help = "event loops, each with its own connections (default:\n"
              "one per CPU this process may run on, at most one per\n"
              "connection)" },
    { "rate", 'R', ARG_POSITIVE, AT(rate_rps), .most = MAX_RATE, .unit = "requests per second",
      .needs = NEED_EVENTS, .usage = "--rate X",
      .help = "open loop: X requests/s in total, spread over the\n"
              "connections; latency counted from when each was due" },
    { "duration", 'd', AT(duration_s), SECONDS(MAX_SECONDS), .needs = NEED_EVENTS, .usage = "--duration S",
      .help = "open loop: run S seconds instead of --requests" },
    { "arrivals", 'A', AT(arrivals), CHOICE(arrivals_kind_names, ARRIVALS_EVEN, 2), .needs = NEED_RATE,
      .usage = "--arrivals even|poisson",
      .help = "open loop: requests evenly spaced, 1/X apart (the\n"
              "default), or a Poisson process of rate X: exponential\n"
              "gaps drawn from --seed (at most 20,000,000 requests)" },
    { "warmup", 'w', ARG_OWN, .read = read_warmup, .needs = NEED_EVENTS, .usage = "--warmup S|N",
      .help = "leave out of the latency figures the exchanges due\n"
              "in the first S seconds ('2s', '0.5s') or the first\n"
              "N to complete ('1000')" },
    { "reconnect", 'C', ARG_SWITCH, AT(reconnect), .needs = NEED_EVENTS, .usage = "--reconnect",
      .help = "a new connection per exchange: connect, send, read the\n"
              "whole reply, close (HTTP/1.0 style); open loop: each\n"
              "connect happens when its exchange falls due, and the\n"
              "latency from the due time includes it; no connecting\n"
              "before the gate (idle and bad connections still do);\n"
              "JSON \"connections_opened\": the connects made" },
    { "idle", 'i', AT(idle), COUNT(0, MAX_CLIENTS), .needs = NEED_EVENTS, .usage = "--idle N",
      .help = "also hold N connections open and silent all along" },
    { "bad", 'z', AT(bad), COUNT(0, MAX_CLIENTS), .needs = NEED_EVENTS, .usage = "--bad N",
      .help = "also N misbehaving connections: they connect before all\n"
              "the others, misbehave from the start gate until the active\n"
              "ones are done, never count as failures (JSON \"bad\")" },
    { "bad-kind", 'Z', AT(bad_kind), CHOICE(events_bad_kind_names, BAD_SILENT, 3), .needs = NEED_EVENTS,
      .usage = "--bad-kind K",
      .help = "silent (default): write requests while the socket takes\n"
              "them, never read; slow: the same, reading at most 1024\n"
              "bytes per interval; drip: send the request one byte per\n"
              "interval (Slowloris), read what comes back" },
    { "bad-interval", 'I', AT(bad_interval_s), SECONDS(MAX_SECONDS), .needs = NEED_EVENTS,
      .usage = "--bad-interval S", .help = "slow/drip: seconds between reads/bytes (default 1)" },
    /* Listed in the usage line, or beside another row, or not at all. */
    { "port", 'p', AT(port), COUNT(1, 65535) },
    { "clients", 'c', AT(clients), COUNT(1, MAX_CLIENTS) },
    { "requests", 'r', AT(requests), COUNT(0, MAX_REQUESTS) },
    { "bufsize", 'B', AT(bufsize), COUNT(1, MAX_BUFSIZE) },
    { "shape", 'X', ARG_OWN, .read = read_shape },
    { "help", 'h', ARG_ACTION, .read = read_help },
};
#define NFLAGS (sizeof flags / sizeof flags[0])

/* A choice is stored as an int into its enum (each as wide as an int). */
#define INT_WIDE(tag) (sizeof(enum tag) == sizeof(int))
_Static_assert(INT_WIDE(service) && INT_WIDE(vary_kind) && INT_WIDE(spin_dist) && INT_WIDE(engine)
               && INT_WIDE(strategy) && INT_WIDE(arrivals_kind) && INT_WIDE(bad_kind), "an enum is not an int");

static const struct flag *flag_named(const char *name)
{
    for (size_t i = 0; i < NFLAGS; i++)
        if (strcmp(flags[i].name, name) == 0)
            return &flags[i];
    die("no flag --%s in the table", name);
}

/* -------------------------------------------------------- reading a value */

void options_fail(const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    warn("%s", msg);
    warn("run 'loadgen --help' for the options");
    exit(EXIT_BAD_ARGS);
}

static long parse_count(const char *flag, const char *text, long min, long max)
{
    long v;
    if (parse_long(text, min, max, &v) < 0)
        options_fail("%s '%s': expected a whole number from %ld to %ld", flag, text, min, max);
    return v;
}

/* A number in (0, max]; *end points past it (to a unit, if one follows). */
static bool parse_number(const char *text, double max, double *out, char **end)
{
    errno = 0;
    double v = strtod(text, end);
    if (*end == text || errno != 0 || !(v > 0 && v <= max))
        return false;
    *out = v;
    return true;
}

/* "expected a, b or c" */
_Noreturn static void fail_choice(const char *flag, const char *text, const struct flag *f)
{
    char words[256] = "";
    size_t used = 0;
    for (int i = 0; i < f->count; i++) {
        const char *sep = i == 0 ? "" : i + 1 < f->count ? ", " : " or ";
        used += (size_t)snprintf(words + used, sizeof words - used, "%s%s", sep, f->names[f->first + i]);
    }
    options_fail("%s '%s': expected %s", flag, text, words);
}

static void read_value(const struct flag *f, const char *text, struct options *o)
{
    char flag[64], *end;
    snprintf(flag, sizeof flag, "--%s", f->name);
    char *to = (char *)o + f->at;
    switch (f->kind) {
    case ARG_SWITCH: *(bool *)to = true; break;
    case ARG_TEXT: *(const char **)to = text; break;
    case ARG_COUNT: *(long *)to = parse_count(flag, text, f->min, f->max); break;
    case ARG_SEED: *(unsigned long *)to = (unsigned long)parse_count(flag, text, f->min, f->max); break;
    case ARG_POSITIVE:
        if (!parse_number(text, f->most, (double *)to, &end) || *end != '\0')
            options_fail("%s '%s': expected %s, more than 0 and at most %.0f", flag, text, f->unit, f->most);
        break;
    case ARG_CHOICE:
    case ARG_ON_OFF:
        for (int i = f->first; i < f->first + f->count; i++) {
            if (strcmp(text, f->names[i]) != 0)
                continue;
            if (f->kind == ARG_ON_OFF)
                *(bool *)to = i == 0;
            else
                memcpy(to, &i, sizeof i);
            return;
        }
        fail_choice(flag, text, f);
        break;
    case ARG_OWN: case ARG_ACTION: f->read(text, o); break;
    }
}

/* --------------------------------------------- the flags read their own way */

/* "--warmup 2s" (seconds) or "--warmup 1000" (requests). */
static void read_warmup(const char *text, struct options *o)
{
    char *end;
    double v;
    if (parse_number(text, MAX_SECONDS, &v, &end) && strcmp(end, "s") == 0) {
        o->warmup_s = v;
        return;
    }
    if (strchr(text, '.'))
        options_fail("--warmup '%s': seconds need an 's' ('%ss'); a count is a whole number", text, text);
    o->warmup_requests = parse_count("--warmup", text, 0, MAX_REQUESTS * MAX_CLIENTS);
}

/* "--shape 15x100": --nbufs 15 --bufsize 100. */
static void read_shape(const char *text, struct options *o)
{
    char nbufs[32];
    const char *x = strchr(text, 'x');
    if (x == NULL || x == text || (size_t)(x - text) >= sizeof nbufs)
        options_fail("--shape '%s': expected N buffers x B bytes, e.g. 15x100", text);
    memcpy(nbufs, text, (size_t)(x - text));
    nbufs[x - text] = '\0';
    const struct flag *n = flag_named("nbufs"), *b = flag_named("bufsize");
    o->nbufs = parse_count("--shape's buffer count", nbufs, n->min, n->max);
    o->bufsize = parse_count("--shape's buffer size", x + 1, b->min, b->max);
}

static void read_help(const char *text, struct options *o)
{
    (void)text, (void)o;
    printf("usage: loadgen --port P --clients N (--requests R | --rate X --duration S) [options]\n");
    for (size_t i = 0; i < NFLAGS; i++) {
        const struct flag *f = &flags[i];
        if (f->section)
            printf("%s\n", f->section);
        if (!f->usage)
            continue;
        /* The help starts in column 25, or two spaces after a longer flag. */
        int width = printf("  %s", f->usage);
        for (const char *line = f->help; *line;) {
            size_t len = strcspn(line, "\n");
            printf("%*s%.*s\n", width <= 23 ? 25 - width : 2, "", (int)len, line);
            width = 0;
            line += len + (line[len] == '\n');
        }
    }
    printf("Prints one JSON object on stdout: counts, latencies (histogram, and histogram_halves:\n"
           "the first and second half of the plan's measured part, after the warm-up;\n"
           "latency_batches: [samples, mean us] of each twentieth of that part, in order;\n"
           "latency_batch_below: {p50, p90, p99, p999}, each twentieth's samples at or below the\n"
           "run's percentile, and latency_batch_under: strictly below the bucket that holds it),\n"
           "connect times (connect_us, connect_histogram, connects_over_1s/3s), in flight\n"
           "(events), the bad connections; requests_measured: the exchanges completed_rps\n"
           "divides.  Open loop only (null otherwise): requests_due_in_window, the schedule's\n"
           "exchanges due in the measured window, sent or not, and measured_window_ns, its start\n"
           "and end after the first due time; send_lateness_us: {p50, p99, max, samples}, how\n"
           "late the generator started each exchange whose connection was free at its due time\n"
           "(not --reconnect).\n"
           "Exit 0: all succeeded, 1: some failed, 2: bad arguments.\n");
    exit(0);
}

/* One flag's bounds as --describe prints them: {"min": m, "max": M} for a count, and
 * {"above": 0, "max": M} for a number that must be more than 0. */
static void describe_flag(const char *name, const char *sep)
{
    const struct flag *f = flag_named(name);
    if (f->kind == ARG_POSITIVE)
        printf("\"%s\": {\"above\": 0, \"max\": %.17g}%s", name, f->most, sep);
    else
        printf("\"%s\": {\"min\": %ld, \"max\": %ld}%s", name, f->min, f->max, sep);
}

/* --describe: the limits the flags are checked against, as JSON, so that labkit checks a
 * value where the student types it from these numbers, not from a copy of them. */
static void read_describe(const char *text, struct options *o)
{
    static const char *const described[] = {
        "clients", "requests", "size", "threads", "idle", "rate", "timeout", "connect-timeout",
        "duration", "nbufs", "bufsize", "bad", "bad-interval", "spin-us",
    };
    size_t n = sizeof described / sizeof described[0];
    (void)text, (void)o;
    printf("{\"flags\": {");
    for (size_t i = 0; i < n; i++)
        describe_flag(described[i], i + 1 < n ? ", " : "");
    printf("}, \"repetition_bytes_max\": %ld, \"threads_engine_samples_max\": %ld, "
           "\"bad_kinds\": [\"%s\", \"%s\", \"%s\"], \"connect_burst_limit\": %d, "
           "\"inflight_interval_ms\": %.17g}\n",
           MAX_REPETITION_BYTES, MAX_SAMPLES, events_bad_kind_names[BAD_SILENT],
           events_bad_kind_names[BAD_SLOW], events_bad_kind_names[BAD_DRIP], MAX_CONNECTING,
           (double)INFLIGHT_INTERVAL_NS / 1e6);
    exit(0);
}

/* ------------------------------------------------------ the rules between flags */

/* given[need]: the first flag given that needs something of the others (NULL: none). */

/* How long to run: --requests, or --duration with --rate. */
static void check_length(const struct options *o)
{
    if (o->duration_s > 0 && o->requests >= 0)
        options_fail("--duration and --requests both say how long to run: give one of them");
    if (o->duration_s > 0 && o->rate_rps == 0)
        options_fail("--duration needs --rate (open loop); a closed loop runs --requests");
    if (o->requests < 0 && o->duration_s == 0)
        options_fail("--requests is required (requests per client, 0 to %ld)%s", MAX_REQUESTS,
                     o->rate_rps > 0 ? ", or --duration with --rate" : "");
}

static void check_service(const struct options *o, const struct flag *const given[])
{
    if (o->vary != VARY_NONE && (o->service == SERVICE_TOP || o->service == SERVICE_SPIN))
        options_fail("--vary draws echo/sink payload sizes; %s requests have none",
                     workload_service_names[o->service]);
    if (given[NEED_SPIN] && o->service != SERVICE_SPIN)
        options_fail("--spin-us and --spin-dist declare the spin service's time per request: add --service spin");
}

/* --strategy: sink uploads of a shape it is given, on blocking connections of its own. */
static void check_strategy(struct options *o, const struct flag *const given[])
{
    if (o->strategy == STRATEGY_NONE) {
        if (o->nbufs > 0 || o->bufsize > 0 || o->repetitions != 1)
            options_fail("--nbufs, --bufsize and --repetitions shape the writes of --strategy: add --strategy");
        return;
    }
    if (o->service != SERVICE_SINK)
        options_fail("--strategy writes sink uploads: add --service sink");
    if (o->nbufs < 0 || o->bufsize < 0)
        options_fail("--strategy needs --nbufs N and --bufsize B (seed 004: 15 x 100 ... 100 x 15)");
    if (o->nbufs * o->bufsize > MAX_REPETITION_BYTES)
        options_fail("--nbufs %ld x --bufsize %ld = %ld bytes per repetition, over the %ld-byte cap: "
                     "use fewer or smaller buffers", o->nbufs, o->bufsize, o->nbufs * o->bufsize,
                     MAX_REPETITION_BYTES);
    if ((double)o->repetitions * (double)(o->nbufs * o->bufsize) > (double)MAX_SIZE)
        options_fail("--repetitions %ld x %ld bytes is over the %ld-byte body cap: use fewer repetitions",
                     o->repetitions, o->nbufs * o->bufsize, MAX_SIZE);
    if (given[NEED_EVENTS] || o->vary != VARY_NONE || o->engine == ENGINE_EVENTS)
        options_fail("--strategy runs blocking connections of its own: drop --engine events, --rate, "
                     "--warmup, --reconnect, --idle, --bad and --vary");
    o->size = o->repetitions * o->nbufs * o->bufsize;
}

/* The threads engine keeps every sample; the open loop's schedule is bounded. */
static void check_engine(const struct options *o, const struct flag *const given[])
{
    if (given[NEED_EVENTS] && o->engine != ENGINE_EVENTS)
        options_fail("--%s needs --engine events (the threads engine is the seeds' closed-loop "
                     "client)", given[NEED_EVENTS]->name);
    if (o->engine == ENGINE_THREADS && o->clients * o->requests > MAX_SAMPLES)
        options_fail("--clients %ld x --requests %ld = %ld latency samples, more than the %ld "
                     "this client keeps in memory: use fewer clients or requests, or "
                     "--engine events (a histogram)",
                     o->clients, o->requests, o->clients * o->requests, MAX_SAMPLES);
    if (o->duration_s > 0 && o->rate_rps * o->duration_s > (double)MAX_REQUESTS * MAX_CLIENTS)
        options_fail("--rate x --duration is too many requests: ask for fewer");
    if (given[NEED_RATE] && o->rate_rps == 0)
        options_fail("--arrivals says how an open loop spaces its requests: add --rate (and --engine events)");
    if (o->arrivals == ARRIVALS_POISSON &&
        (o->duration_s > 0 ? o->rate_rps * o->duration_s : (double)o->clients * (double)o->requests)
            > ARRIVALS_MAX_POISSON)
        options_fail("--arrivals poisson draws the whole schedule first, 8 bytes a request: at most %ld "
                     "requests (lower --rate or --duration)", ARRIVALS_MAX_POISSON);
}

/* The CPUs this process may run on (its affinity: what labkit pinned it to). */
static long cpus_allowed(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) < 0)
        return 1;
    long n = CPU_COUNT(&set);
    return n > 0 ? n : 1;
}

/* ------------------------------------------------------------- the parse */

struct options options_parse(int argc, char **argv)
{
    struct option long_opts[NFLAGS + 1];
    for (size_t i = 0; i < NFLAGS; i++) {
        bool bare = flags[i].kind == ARG_SWITCH || flags[i].kind == ARG_ACTION;
        long_opts[i] = (struct option){ flags[i].name, bare ? no_argument : required_argument, NULL,
                                        flags[i].letter };
    }
    long_opts[NFLAGS] = (struct option){ 0 };
    struct options o = {
        .host = "127.0.0.1", .port = -1, .clients = -1, .requests = -1,
        .service = SERVICE_TOP, .k = 2, .size = 64,
        .timeout_s = 10, .connect_timeout_s = 5, .engine = ENGINE_THREADS, .seed = 1,
        .nodelay = true, .nbufs = -1, .bufsize = -1, .repetitions = 1,
        .bad_kind = BAD_SILENT, .bad_interval_s = 1.0,
    };
    const struct flag *given[NEED_KINDS] = { NULL };
    int opt, index;

    opterr = 0; /* we word the messages ourselves */
    while ((index = -1, opt = getopt_long(argc, argv, "", long_opts, &index)) != -1) {
        if (opt == '?' || index < 0)
            options_fail("unknown option '%s'", argv[optind - 1]);
        const struct flag *f = &flags[index];
        read_value(f, optarg, &o);
        if (f->needs != NEED_NOTHING && !given[f->needs])
            given[f->needs] = f;
    }
    if (optind < argc)
        options_fail("unexpected argument '%s'", argv[optind]);
    if (o.port < 0)
        options_fail("--port is required: the port the server printed after 'listening'");
    if (o.clients < 0)
        options_fail("--clients is required (1 to %ld)", MAX_CLIENTS);
    check_length(&o);
    check_service(&o, given);
    check_strategy(&o, given);
    check_engine(&o, given);
    if (o.engine == ENGINE_EVENTS) {
        if (o.threads == 0)
            o.threads = cpus_allowed();
        if (o.threads > o.clients)
            o.threads = o.clients;  /* a loop with no active connection would only wait */
    } else {
        o.threads = o.clients;      /* one per connection */
    }
    return o;
}
