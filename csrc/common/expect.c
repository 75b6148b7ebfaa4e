/* expect.c -- see expect.h. */
#include "expect.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <time.h>

#include "common/util.h"

static bool counting;
static long expected;
static double timeout_s;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed; /* on CLOCK_MONOTONIC, like now_ns() */
static long open_now;          /* sessions open, whatever their batch */
static long batch;             /* the batch now filling; 1, 2, ... */
static long arrived, done;     /* ... its sessions opened and closed */
static long long bytes;
static uint64_t started_ns;    /* 0: no session of this batch yet */

/* Print the batch's line and start the next one (lock held). */
static void batch_report(bool timed_out)
{
    char line[256];
    double ms = (double)(now_ns() - started_ns) / 1e6;
    if (timed_out)
        snprintf(line, sizeof line,
                 "expect: batch %ld: timed out after %g s: %ld of %ld connections arrived, "
                 "%ld done, %lld bytes", batch, timeout_s, arrived, expected, done, bytes);
    else
        snprintf(line, sizeof line, "expect: batch %ld: %ld of %ld connections done, %lld bytes in %.3f ms",
                 batch, done, expected, bytes, ms);
    printf("%s\n", line);
    fflush(stdout);
    if (timed_out)
        warn("%s: fewer clients came than --expect said", line + 8);
    batch++;
    arrived = open_now; /* still open: theirs is the next batch */
    done = 0;
    bytes = 0;
    started_ns = open_now ? now_ns() : 0;
}

/* Report each batch that is still short at its deadline. */
static void *watch(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&lock);
    for (;;) {
        if (started_ns == 0) {
            pthread_cond_wait(&changed, &lock);
            continue;
        }
        long waiting_for = batch;
        uint64_t deadline = started_ns + (uint64_t)(timeout_s * 1e9);
        struct timespec at = { .tv_sec = (time_t)(deadline / 1000000000u),
                               .tv_nsec = (long)(deadline % 1000000000u) };
        /* A batch that completes meanwhile is reported by its last close. */
        if (pthread_cond_timedwait(&changed, &lock, &at) == ETIMEDOUT && batch == waiting_for)
            batch_report(true);
    }
    return NULL;
}

void expect_start(long n, double timeout)
{
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&changed, &attr);
    pthread_condattr_destroy(&attr);
    expected = n;
    timeout_s = timeout;
    batch = 1;
    counting = true;
    pthread_t tid;
    int err = pthread_create(&tid, NULL, watch, NULL);
    if (err != 0) {
        errno = err;
        die_errno("cannot start the --expect thread");
    }
    pthread_detach(tid);
}

void expect_session_opened(void)
{
    if (!counting)
        return;
    pthread_mutex_lock(&lock);
    open_now++;
    arrived++;
    if (started_ns == 0) {
        started_ns = now_ns();
        pthread_cond_signal(&changed);
    }
    pthread_mutex_unlock(&lock);
}

void expect_session_closed(long long bytes_in)
{
    if (!counting)
        return;
    pthread_mutex_lock(&lock);
    open_now--;
    done++;
    bytes += bytes_in;
    if (done == expected) {
        batch_report(false);
        pthread_cond_signal(&changed); /* the next batch has a new deadline */
    }
    pthread_mutex_unlock(&lock);
}
