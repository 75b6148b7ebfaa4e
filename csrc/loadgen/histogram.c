/* histogram.c -- log-linear latency histogram (see histogram.h). */
#include "loadgen/histogram.h"

#include <math.h>
#include <string.h>

void hist_init(struct histogram *h)
{
    memset(h, 0, sizeof *h);
    h->min = UINT64_MAX;
}

size_t hist_bucket(uint64_t value)
{
    if (value < HIST_EXACT)
        return (size_t)value;
    unsigned magnitude = 63u - (unsigned)__builtin_clzll(value); /* >= HIST_SUB_BITS + 1 */
    unsigned shift = magnitude - HIST_SUB_BITS;
    uint64_t top = value >> shift;                                /* HIST_SUB .. 2*HIST_SUB-1 */
    return HIST_EXACT + (size_t)(magnitude - HIST_SUB_BITS - 1) * HIST_SUB
         + (size_t)(top - HIST_SUB);
}

uint64_t hist_bucket_low(size_t bucket)
{
    if (bucket < HIST_EXACT)
        return bucket;
    size_t above = bucket - HIST_EXACT;
    unsigned shift = (unsigned)(above / HIST_SUB) + 1;
    uint64_t top = HIST_SUB + above % HIST_SUB;
    return top << shift;
}

uint64_t hist_bucket_high(size_t bucket)
{
    if (bucket < HIST_EXACT)
        return bucket;
    unsigned shift = (unsigned)((bucket - HIST_EXACT) / HIST_SUB) + 1;
    return hist_bucket_low(bucket) + ((UINT64_C(1) << shift) - 1);
}

void hist_record(struct histogram *h, uint64_t value)
{
    h->count[hist_bucket(value)]++;
    h->total++;
    h->sum += (double)value;
    if (value < h->min)
        h->min = value;
    if (value > h->max)
        h->max = value;
}

void hist_merge(struct histogram *into, const struct histogram *from)
{
    for (size_t b = 0; b < HIST_BUCKETS; b++)
        into->count[b] += from->count[b];
    into->total += from->total;
    into->sum += from->sum;
    if (from->min < into->min)
        into->min = from->min;
    if (from->max > into->max)
        into->max = from->max;
}

uint64_t hist_percentile(const struct histogram *h, double p)
{
    if (h->total == 0)
        return 0;
    uint64_t rank = (uint64_t)ceil(p / 100.0 * (double)h->total);
    if (rank < 1)
        rank = 1;
    uint64_t seen = 0;
    for (size_t b = 0; b < HIST_BUCKETS; b++) {
        seen += h->count[b];
        if (seen >= rank) {
            uint64_t low = hist_bucket_low(b), high = hist_bucket_high(b);
            uint64_t middle = low + (high - low) / 2;
            /* The extremes are known exactly: never report past them. */
            return middle < h->min ? h->min : middle > h->max ? h->max : middle;
        }
    }
    return h->max;
}
