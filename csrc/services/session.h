/* session.h -- one client connection, as a state machine: bytes in, bytes out.
 *
 * Every service (top, echo, sink) is written once against this interface,
 * and every concurrency model only moves bytes between a socket and a
 * session.  A model's loop:
 *
 *     write what session_write_buf() offers, report it with session_did_write();
 *     close once session_done();
 *     read into session_read_buf() (unless its length is 0), report with
 *     session_did_read(), or session_did_eof() when the client closed.
 *
 * Buffers are bounded: input holds at most SESSION_IN_CAP bytes and output
 * at most SESSION_OUT_CAP.  A client that sends requests but never reads the
 * replies fills the output, then the input, then session_read_buf() offers
 * 0 bytes and the model stops reading it until its output drains.
 *
 * The buffer session_read_buf() returns belongs to the read until
 * session_did_read() or session_did_eof() reports it, and the bytes
 * session_write_buf() offers belong to the write until session_did_write():
 * the session neither moves, reuses nor frees them meanwhile, whatever else
 * happens (a completed write answering queued requests, a read adding
 * replies).  A completion-based model (io_uring) has the kernel fill and
 * drain them while its loop goes on, and asks for no second buffer of a
 * kind until the first operation has completed.
 */
#ifndef LAB_SESSION_H
#define LAB_SESSION_H

#include <stdbool.h>
#include <stddef.h>

#define SESSION_IN_CAP   (16 * 1024)  /* one read() takes at most this much */
#define SESSION_OUT_CAP  (160 * 1024) /* fits the largest reply, TOP 1000 */
#define SESSION_LINE_MAX 1024         /* a request line longer than this is an error */

typedef struct session session_t;
typedef struct service service_t;

/* ---- what a concurrency model uses ---- */

/* A session for one new connection, or NULL if out of memory. */
session_t  *session_new(const service_t *svc);
void        session_free(session_t *s);
/* Where the next read() may put bytes; *len == 0 means do not read now.
 * Asked again before that read was reported, it returns the same buffer. */
char       *session_read_buf(session_t *s, size_t *len);
/* n > 0 bytes were read into that buffer by ONE read call. */
void        session_did_read(session_t *s, size_t n);
/* The client closed its side: finish the replies already due, then done. */
void        session_did_eof(session_t *s);
/* Bytes waiting to be written (*len may be 0; NULL when 0), and how many were written. */
const char *session_write_buf(session_t *s, size_t *len);
void        session_did_write(session_t *s, size_t n);
/* True once the session has nothing more to say and should be closed
 * (after an ERR reply, or after end of input, once the output is flushed). */
bool        session_done(const session_t *s);

/* ---- what a service implements and uses ---- */

struct service {
    const char *name;
    size_t state_size;  /* per-connection state, zeroed by session_new */
    /* Handle the unconsumed input in[0..len): return how many bytes were
     * consumed.  Called after every read and again when the output has
     * drained.  Replies go through session_out_*; a bad request calls
     * session_fail() and returns len. */
    size_t (*consume)(session_t *s, void *state, const char *in, size_t len);
};

/* NULL if there is no service by that name. */
const service_t *service_find(const char *name);
/* "top|echo|sink", for usage messages. */
const char *service_names(void);

size_t session_out_pending(const session_t *s);
/* How many more output bytes can be reserved now (fewer while a write is in flight). */
size_t session_out_room(const session_t *s);
/* Room for n more output bytes (NULL if over the cap); commit what was used. */
char  *session_out_reserve(session_t *s, size_t n);
void   session_out_commit(session_t *s, size_t n);
/* Queue "ERR <reason>\n", ignore further input, be done once it is sent. */
void   session_fail(session_t *s, const char *reason);

/* Find the next request line in in[0..len) (LF or CRLF ended).
 * 1: found; *line_len excludes the line end, *used includes it.
 * 0: incomplete, wait for more.
 * -1: longer than SESSION_LINE_MAX: the session has been failed with ERR,
 *     and consume() should return len. */
int request_line(session_t *s, const char *in, size_t len, size_t *line_len, size_t *used);

/* A request line of the form "<verb> <n>" (what request_line found: line[0..len)), n a
 * decimal from 0 to max and nothing after it: n.  Else -1, the session failed with ERR:
 * "expected <usage>" for another verb or an empty line, `range` for a bad n. */
long long request_number(session_t *s, const char *line, size_t len, const char *verb, long long max,
                         const char *usage, const char *range);

#endif
