/* histogram.h -- latencies in bounded memory, HdrHistogram style.
 *
 * Log-linear buckets: values below 256 ns each have a bucket of their own;
 * above that every power of two is cut into 128 equal buckets, so a bucket
 * is at most 1/128 of its lower bound wide.  A percentile is reported as the
 * middle of the bucket holding the nearest-rank sample, which is therefore
 * within HIST_PRECISION (1/256, about 0.4%) of the exact value.  The whole
 * uint64 range fits in 7,424 counters (58 KiB), however many samples.
 */
#ifndef LOADGEN_HISTOGRAM_H
#define LOADGEN_HISTOGRAM_H

#include <stddef.h>
#include <stdint.h>

#define HIST_SUB_BITS 7                          /* 128 buckets per power of two */
#define HIST_SUB (1u << HIST_SUB_BITS)
#define HIST_EXACT (2u * HIST_SUB)               /* 0..255: one bucket per value */
#define HIST_BUCKETS (HIST_EXACT + (64u - HIST_SUB_BITS - 1) * HIST_SUB)
#define HIST_PRECISION (1.0 / (2.0 * HIST_SUB))  /* relative error of a percentile */

struct histogram {
    uint64_t count[HIST_BUCKETS];
    uint64_t total;                /* samples recorded */
    uint64_t min, max;             /* exact */
    double sum;                    /* for the exact mean */
};

void hist_init(struct histogram *h);
void hist_record(struct histogram *h, uint64_t value);
/* Add every sample of `from` to `into` (one histogram from many threads' own). */
void hist_merge(struct histogram *into, const struct histogram *from);
/* Nearest-rank percentile p (0 < p <= 100); 0 when empty. */
uint64_t hist_percentile(const struct histogram *h, double p);

/* The bucket a value falls in, and the lowest and highest value it holds. */
size_t hist_bucket(uint64_t value);
uint64_t hist_bucket_low(size_t bucket);
uint64_t hist_bucket_high(size_t bucket);

#endif
