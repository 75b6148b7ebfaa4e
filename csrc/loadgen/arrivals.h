/* arrivals.h -- when the open loop's exchanges fall due.
 *
 * Exchange g of the run (g = 0, 1, 2 ...; exchange j of connection c being
 * g = j * clients + c, events.c) falls due at start + arrivals_at(a, g):
 *
 *   even     g / rate: one every 1/rate exactly, wrk2's constant throughput;
 *   poisson  the first at 0, then gaps drawn independently from the
 *            exponential distribution of mean 1/rate: a Poisson process of
 *            the same mean rate (mutilate's exponential inter-arrivals), the one
 *            M/M/1 and M/D/1 queueing theory assumes.  Seeded: the same
 *            --seed, the same schedule.
 *
 * The schedule is the run's, one for every event-loop thread.  Poisson draws
 * it whole before the run, 8 bytes an exchange, so its exchanges are bounded
 * (ARRIVALS_MAX_POISSON); even needs no memory.  Due times never decrease
 * with g, so arrivals_due_by() can search them.
 */
#ifndef LOADGEN_ARRIVALS_H
#define LOADGEN_ARRIVALS_H

#include <stdint.h>

enum arrivals_kind { ARRIVALS_EVEN, ARRIVALS_POISSON };
extern const char *const arrivals_kind_names[];

#define ARRIVALS_MAX_POISSON 20000000L   /* exchanges of a Poisson schedule: 160 MB */

struct arrivals {
    enum arrivals_kind kind;
    double ns_per_request;         /* the mean gap, 1e9 / rate */
    long planned;                  /* exchanges in the run */
    uint64_t *at_ns;               /* poisson: each one's due time from the start */
};

/* The schedule of `planned` exchanges at `rate` per second; 0, or -1 when a
 * Poisson schedule would not fit in memory. */
int arrivals_init(struct arrivals *a, enum arrivals_kind kind, double rate, long planned, unsigned long seed);
void arrivals_free(struct arrivals *a);
/* When exchange g (0 <= g < planned) is due, in ns from the start. */
uint64_t arrivals_at(const struct arrivals *a, long g);
/* How many exchanges are due by `since_start_ns` (those with arrivals_at <= it). */
long arrivals_due_by(const struct arrivals *a, uint64_t since_start_ns);

#endif
