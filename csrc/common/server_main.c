/* server_main.c -- see server_main.h. */
#include "server_main.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <pthread.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "common/expect.h"
#include "common/net.h"
#include "common/util.h"

static volatile sig_atomic_t stop_pipe_w = -1;
static int stop_pipe_r = -1;
static int spare_fd = -1;
static pthread_rwlock_t descriptors = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;
static volatile sig_atomic_t report_on_stop;

struct server_counters server_counters;

/* The models that take --idle-timeout, for the refusal's message. */
#define IDLE_TIMEOUT_MODELS "iterative, threaded, pool, fork, prefork, select, poll, epoll, epoll_et, " \
                            "select_fork, epoll_workers, epoll_reuseport"

void server_descriptors_enter(void)
{
    pthread_rwlock_rdlock(&descriptors);
}

void server_descriptors_leave(void)
{
    pthread_rwlock_unlock(&descriptors);
}

/* Append "name=<n>" to *at: printf is not async-signal-safe, this is. */
static void put_count(char **at, const char *name, unsigned long n)
{
    char digits[24];
    int len = 0;
    do
        digits[len++] = (char)('0' + n % 10);
    while ((n /= 10) > 0);
    *(*at)++ = ' ';
    while (*name)
        *(*at)++ = *name++;
    *(*at)++ = '=';
    while (len > 0)
        *(*at)++ = digits[--len];
}

void server_report_counters(void)
{
    char line[256], *at = line;
    memcpy(at, "counters", 8);
    at += 8;
    put_count(&at, "pid", (unsigned long)getpid());
    put_count(&at, "accepted", atomic_load(&server_counters.accepted));
    put_count(&at, "futile_accepts", atomic_load(&server_counters.futile_accepts));
    put_count(&at, "listener_wakeups", atomic_load(&server_counters.listener_wakeups));
    put_count(&at, "shed_idle", atomic_load(&server_counters.shed_idle));
    *at++ = '\n';
    /* ONE write: a pipe takes up to PIPE_BUF bytes whole, so workers' lines never interleave.
     * Nobody reading any more (EPIPE) is not worth a word. */
    (void)!write(STDOUT_FILENO, line, (size_t)(at - line));
}

void server_report_counters_on_stop(void)
{
    report_on_stop = 1;
}

static void on_stop_signal(int sig)
{
    (void)sig;
    if (stop_pipe_w < 0) {
        if (report_on_stop)
            server_report_counters();
        _exit(0); /* nothing to save: the kernel closes every socket */
    }
    int saved = errno;
    (void)!write(stop_pipe_w, "x", 1);
    errno = saved;
}

int server_stop_fd(void)
{
    if (stop_pipe_r < 0) {
        int p[2];
        if (pipe2(p, O_CLOEXEC | O_NONBLOCK) < 0)
            die_errno("pipe");
        stop_pipe_r = p[0];
        stop_pipe_w = p[1];
    }
    return stop_pipe_r;
}

void server_after_fork(void)
{
    if (stop_pipe_r < 0)
        return;
    close(stop_pipe_r);
    close(stop_pipe_w);
    stop_pipe_r = -1;
    stop_pipe_w = -1;
}

/* The CPUs this process may run on (taskset, cgroups), at least 1. */
static int usable_cpus(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) < 0)
        return 1;
    return CPU_COUNT(&set) > 0 ? CPU_COUNT(&set) : 1;
}

static void usage(FILE *to, const struct server_model *m)
{
    fprintf(to,
            "usage: %s [--port N] [--host ADDR] [--service %s]%s\n"
            "  %s\n"
            "  --port N      TCP port; 0 (the default) picks a free one\n"
            "  --host ADDR   address to listen on (default 127.0.0.1)\n"
            "  --service S   what to serve (default top)\n"
            "  --backlog N   listen()'s backlog: connections the kernel completes and queues\n"
            "                until accepted, 1 to 65535 (default SOMAXCONN, %d); the kernel\n"
            "                caps N at net.core.somaxconn (/proc/sys/net/core/somaxconn), and\n"
            "                queues up to N+1: it turns new ones away only once more than N wait\n"
            "%s"
            "%s"
            "%s"
            "Prints \"listening <port>\" when ready; SIGTERM stops it.\n",
            m->name, service_names(), m->has_workers ? " [--workers N]" : "", m->summary, SOMAXCONN,
            m->has_idle_timeout
            ? "  --idle-timeout S  close a connection on which nothing moved, in either\n"
              "                direction, for S seconds (fractions allowed; default 0: never)\n"
            : "",
            m->has_workers ? "  --workers N   number of workers (default: one per usable CPU)\n" : "",
            m->serves_in_children ? ""
            : "  --expect N    report each batch of N connections on stdout: its bytes and the\n"
              "                time from the first connect to the last close\n"
              "  --expect-timeout S  report a batch that is still short after S seconds\n"
              "                (default 60) instead of waiting for ever\n");
}

/* Bad command line: say why and how to get help, exit 2. */
static _Noreturn void bad_usage(const struct server_model *m, const char *why)
{
    fprintf(stderr, "%s: %s\nTry '%s --help'.\n", m->name, why, m->name);
    exit(2);
}

int server_main(int argc, char **argv, const struct server_model *model)
{
    static const struct option options[] = {
        { "port", required_argument, NULL, 'p' },
        { "host", required_argument, NULL, 'H' },
        { "service", required_argument, NULL, 's' },
        { "workers", required_argument, NULL, 'w' },
        { "expect", required_argument, NULL, 'e' },
        { "expect-timeout", required_argument, NULL, 'E' },
        { "backlog", required_argument, NULL, 'b' },
        { "idle-timeout", required_argument, NULL, 'i' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    const char *host = "127.0.0.1";
    long port = 0, workers = 0, expect = 0, backlog = SOMAXCONN;
    double expect_timeout = 60;
    bool expect_timeout_given = false;
    struct server_config cfg = { .service = service_find("top") };
    char why[256];
    int opt;

    set_program_name(model->name);
    opterr = 0; /* we word the errors ourselves */
    while ((opt = getopt_long(argc, argv, ":p:H:s:w:e:E:b:i:h", options, NULL)) != -1) {
        switch (opt) {
        case 'p':
            if (parse_long(optarg, 0, 65535, &port) < 0)
                bad_usage(model, "--port needs a number from 0 to 65535");
            break;
        case 'H':
            host = optarg;
            break;
        case 's':
            cfg.service = service_find(optarg);
            if (cfg.service == NULL) {
                snprintf(why, sizeof why, "unknown service '%s'; choose one of %s", optarg,
                         service_names());
                bad_usage(model, why);
            }
            break;
        case 'w':
            if (!model->has_workers) {
                snprintf(why, sizeof why,
                         "--workers is not supported: the %s model has no workers; drop the flag",
                         model->name);
                bad_usage(model, why);
            }
            if (parse_long(optarg, 1, 4096, &workers) < 0)
                bad_usage(model, "--workers needs a number from 1 to 4096");
            break;
        case 'e':
            if (model->serves_in_children) {
                snprintf(why, sizeof why, "--expect is not supported: the %s model serves in child "
                         "processes, each with its own counts; use a one-process model", model->name);
                bad_usage(model, why);
            }
            if (parse_long(optarg, 1, 1000000, &expect) < 0)
                bad_usage(model, "--expect needs a connection count from 1 to 1000000");
            break;
        case 'E': {
            char *end;
            errno = 0;
            expect_timeout = strtod(optarg, &end);
            if (end == optarg || *end != '\0' || errno != 0 || !(expect_timeout > 0 && expect_timeout <= 86400))
                bad_usage(model, "--expect-timeout needs seconds, more than 0 and at most 86400");
            expect_timeout_given = true;
            break;
        }
        case 'b':
            if (parse_long(optarg, 1, 65535, &backlog) < 0)
                bad_usage(model, "--backlog needs a number from 1 to 65535");
            break;
        case 'i': {
            char *end;
            errno = 0;
            cfg.idle_timeout = strtod(optarg, &end);
            if (end == optarg || *end != '\0' || errno != 0 ||
                !(cfg.idle_timeout >= 0 && cfg.idle_timeout <= 86400))
                bad_usage(model, "--idle-timeout needs seconds from 0 (never) to 86400 "
                          "(fractions allowed, e.g. 0.5)");
            if (cfg.idle_timeout > 0 && !model->has_idle_timeout) { /* 0 asks for nothing */
                snprintf(why, sizeof why, "--idle-timeout is not supported by the %s model; "
                         "the models that have it: " IDLE_TIMEOUT_MODELS, model->name);
                bad_usage(model, why);
            }
            break;
        }
        case 'h':
            usage(stdout, model);
            return 0;
        case ':':
            snprintf(why, sizeof why, "%s needs a value", argv[optind - 1]);
            bad_usage(model, why);
        default:
            snprintf(why, sizeof why, "unknown option '%s'", argv[optind - 1]);
            bad_usage(model, why);
        }
    }
    if (optind < argc) {
        snprintf(why, sizeof why, "unexpected argument '%s'", argv[optind]);
        bad_usage(model, why);
    }
    if (expect_timeout_given && expect == 0)
        bad_usage(model, "--expect-timeout needs --expect N");
    if (model->has_workers && workers == 0)
        workers = usable_cpus();
    cfg.workers = (int)workers;

    if (ignore_sigpipe() < 0)
        die_errno("ignore SIGPIPE");
    struct sigaction sa = { .sa_handler = on_stop_signal }; /* no SA_RESTART: wake the loop */
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGTERM, &sa, NULL) < 0 || sigaction(SIGINT, &sa, NULL) < 0)
        die_errno("install the SIGTERM handler");
    if (set_fd_limit(LONG_MAX) < 0) /* many clients need many descriptors */
        warn_errno("cannot raise the open-file limit");
    spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);

    cfg.backlog = (int)backlog;
    cfg.host = host;
    cfg.own_listeners = model->own_listeners;
    if (model->own_listeners) { /* hold the port; the workers listen (epoll_reuseport.c) */
        cfg.listen_fd = net_bind_reuseport(host, (int)port);
        if (cfg.listen_fd < 0)
            die_errno("cannot bind %s port %ld", host, port);
    } else {
        cfg.listen_fd = net_listen(host, (int)port, (int)backlog);
        if (cfg.listen_fd < 0)
            die_errno("cannot listen on %s port %ld", host, port);
    }
    cfg.port = net_local_port(cfg.listen_fd);
    if (!model->own_listeners)
        server_announce(cfg.port);
    if (expect > 0)
        expect_start(expect, expect_timeout);
    return model->serve(&cfg);
}

void server_announce(int port)
{
    printf("listening %d\n", port);
    if (fflush(stdout) != 0)
        die_errno("write to stdout");
}

static int shed_with_spare(int listen_fd, bool nonblocking);
static int accept_and_handle(int listen_fd, bool nonblocking);

/* Out of descriptors: take the waiting connection with the spare's slot.
 * Returns it if descriptors came free meanwhile, else sheds it (the client
 * is told at once, and the listener stops being ready) and returns -1. */
static int accept_with_spare(int listen_fd, bool nonblocking)
{
    struct pollfd waiting = { .fd = listen_fd, .events = POLLIN };
    for (;;) {
        pthread_rwlock_wrlock(&descriptors);
        if (poll(&waiting, 1, 0) > 0) { /* a connection is waiting: take it now, with the spare's slot */
            int fd = shed_with_spare(listen_fd, nonblocking);
            int err = errno;
            pthread_rwlock_unlock(&descriptors);
            errno = err;
            return fd;
        }
        pthread_rwlock_unlock(&descriptors);
        /* Nothing waiting: Linux reports EMFILE before it would wait.  Wait outside the
         * lock (a blocking model), or say so (a non-blocking one: its loop waits). */
        if (fcntl(listen_fd, F_GETFL) & O_NONBLOCK) {
            errno = EAGAIN;
            return -1;
        }
        if (poll(&waiting, 1, -1) < 0 && errno != EINTR)
            return -1;
    }
}

/* accept_with_spare's work, while no other thread can open a descriptor. */
static int shed_with_spare(int listen_fd, bool nonblocking)
{
    static time_t last_warning;
    if (spare_fd < 0 && (spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0) {
        nanosleep(&(struct timespec){ .tv_nsec = 10 * 1000 * 1000 }, NULL); /* do not spin */
        errno = EMFILE;
        return -1;
    }
    close(spare_fd);
    /* A connection was waiting (accept_with_spare polled); in a model whose
     * processes share the listener another may take it first, and a blocking
     * accept then waits for the next, holding only this process's lock. */
    int fd = net_accept(listen_fd, nonblocking);
    int err = errno;
    spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (err == EMFILE && spare_fd < 0) /* what server_descriptors_enter is there to prevent */
            warn("lost the spare descriptor: something else opened a file in its slot");
        errno = err;
        return -1;
    }
    if (spare_fd >= 0)
        return fd; /* not out of descriptors any more: serve it */
    close(fd);
    spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (time(NULL) != last_warning) { /* at most one warning a second */
        last_warning = time(NULL);
        struct rlimit lim;
        getrlimit(RLIMIT_NOFILE, &lim);
        warn("out of file descriptors (limit %llu): shed a connection",
             (unsigned long long)lim.rlim_cur);
    }
    errno = EMFILE;
    return -1;
}

int server_accept(int listen_fd, bool nonblocking)
{
    int fd = accept_and_handle(listen_fd, nonblocking);
    if (fd >= 0)
        atomic_fetch_add_explicit(&server_counters.accepted, 1, memory_order_relaxed);
    return fd;
}

/* server_accept's work: accept, and answer what can go wrong. */
static int accept_and_handle(int listen_fd, bool nonblocking)
{
    int fd = net_accept(listen_fd, nonblocking);
    if (fd >= 0 || errno == EAGAIN)
        return fd;

    int err = errno;
    switch (err) {
    case EMFILE:
    case ENFILE:
        return accept_with_spare(listen_fd, nonblocking);
    case ENOBUFS:
    case ENOMEM:
        warn_errno("accept");
        nanosleep(&(struct timespec){ .tv_nsec = 10 * 1000 * 1000 }, NULL);
        break;
    case EBADF:
    case EINVAL:
    case ENOTSOCK:
    case EOPNOTSUPP:
    case EFAULT:
        die_errno("accept"); /* our bug, not the client's */
    default:
        break; /* ECONNABORTED, EPROTO, EPERM ...: that connection only */
    }
    errno = err;
    return -1;
}
