/* arrivals.c -- the open loop's schedule, even or Poisson (arrivals.h). */
#include "loadgen/arrivals.h"

#include <math.h>
#include <stdlib.h>

const char *const arrivals_kind_names[] = { "even", "poisson" };

/* splitmix64 (Steele, Lea and Flood 2014): a stream of well-mixed 64-bit
 * values from one seed, each step independent of the others. */
static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

int arrivals_init(struct arrivals *a, enum arrivals_kind kind, double rate, long planned, unsigned long seed)
{
    *a = (struct arrivals){ .kind = kind, .ns_per_request = 1e9 / rate, .planned = planned };
    if (kind == ARRIVALS_EVEN || planned <= 0)
        return 0;
    if (planned > ARRIVALS_MAX_POISSON || !(a->at_ns = malloc((size_t)planned * sizeof *a->at_ns)))
        return -1;
    /* Inverse transform: -ln(u) with u uniform in (0, 1] is exponential of mean 1.
     * The 53 high bits make u a double exactly; u is never 0, so the log is finite.
     * The sum is kept in double ns (exact to well below a nanosecond for any run
     * the bound allows) and rounded once per exchange, so no rounding accumulates. */
    uint64_t state = 0x5eed0a771a15ull ^ (uint64_t)seed;  /* not the body sizes' stream */
    double t = 0;
    for (long g = 0; g < planned; g++) {
        a->at_ns[g] = (uint64_t)llround(t);
        double u = (double)((splitmix64(&state) >> 11) + 1) / 9007199254740992.0;
        t += -log(u) * a->ns_per_request;
    }
    return 0;
}

void arrivals_free(struct arrivals *a)
{
    free(a->at_ns);
    a->at_ns = NULL;
}

uint64_t arrivals_at(const struct arrivals *a, long g)
{
    if (a->kind == ARRIVALS_POISSON)
        return a->at_ns[g];
    return (uint64_t)((double)g * a->ns_per_request);
}

long arrivals_due_by(const struct arrivals *a, uint64_t since_start_ns)
{
    /* The first g not yet due, by bisection (due times never decrease). */
    long lo = 0, hi = a->planned;
    if (a->kind == ARRIVALS_EVEN) {  /* start near the answer; the bisection corrects the rounding */
        long guess = (long)((double)since_start_ns / a->ns_per_request);
        lo = guess > 2 ? guess - 2 : 0;
        hi = guess + 3 < a->planned ? guess + 3 : a->planned;
        if (lo > a->planned)
            lo = a->planned;
        if (lo > 0 && arrivals_at(a, lo - 1) > since_start_ns)
            lo = 0;
        if (hi < a->planned && arrivals_at(a, hi) <= since_start_ns)
            hi = a->planned;
    }
    while (lo < hi) {
        long mid = lo + (hi - lo) / 2;
        if (arrivals_at(a, mid) <= since_start_ns)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}
