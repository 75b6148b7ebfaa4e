/* expect.h -- "--expect N": the seed 002 servers' contract, kept honest.
 *
 * Seed 002's servers were started with the number of connections to wait
 * for, and printed the time to receive everything once that many had come
 * and gone.  Given fewer clients they waited for ever.  Here a batch is N
 * connections: it starts at the first connection's session and ends when N
 * sessions have closed, or when --expect-timeout seconds have passed since
 * it started, whichever comes first.  Either way the server prints one line
 * on stdout and goes on serving.  Like the seed's servers it counts
 * connections, not clients: a second client's connections that come while
 * a batch fills are part of it, and connections still open when a batch
 * ends belong to the next one:
 *
 *   expect: batch 1: 100 of 100 connections done, 104857600 bytes in 912.345 ms
 *   expect: batch 2: timed out after 5 s: 60 of 100 connections arrived, 58 done, 60817408 bytes
 *
 * (the time-out also warns on stderr: a client that never came is a failure).
 * The counters live in one process, so models that serve in child
 * processes refuse --expect.  Sessions call the two hooks below; they cost
 * one test of a flag when --expect was not given.
 */
#ifndef LAB_EXPECT_H
#define LAB_EXPECT_H

/* Start counting batches of n connections (a thread waits for each batch). */
void expect_start(long n, double timeout_s);

/* A session opened; a session closed after `bytes_in` bytes from its client. */
void expect_session_opened(void);
void expect_session_closed(long long bytes_in);

#endif
