/* session_drive.c -- one session (services/session.h) driven byte by byte from a script,
 * with no socket: what a concurrency model would do, one step per line, and what the
 * session answered printed back.  tests/servers/test_session.py holds the scripts.
 *
 *   service NAME     a new session of that service (top, echo, sink, spin)
 *   read TEXT        one read() of TEXT (C escapes: \n \r \t \\ \xHH), in the buffer
 *                    session_read_buf() offers; refused, and said, when it offers less
 *   fill N C         N bytes of character C, read after read, until they are in or the
 *                    session offers no room: prints how many went in
 *   room             the room session_read_buf() offers now
 *   samebuf          session_read_buf() asked twice before a read is reported: same buffer?
 *   write N|all      one write() of at most N of the bytes session_write_buf() offers:
 *                    prints them (escaped) and reports them written
 *   eof              the client closed its side
 *   done             session_done()
 *   pending          session_out_pending()
 */
#include "common/server_main.h"
#include "services/session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The top service opens /proc under the server's descriptor lock (server_main.c): one
 * thread here, and no spare descriptor to guard, so nothing to exclude. */
void server_descriptors_enter(void) {}
void server_descriptors_leave(void) {}

static size_t unescape(const char *text, char *out)
{
    size_t n = 0;
    for (const char *p = text; *p; p++) {
        if (*p != '\\' || p[1] == '\0') {
            out[n++] = *p;
            continue;
        }
        p++;
        switch (*p) {
        case 'n': out[n++] = '\n'; break;
        case 'r': out[n++] = '\r'; break;
        case 't': out[n++] = '\t'; break;
        case 'x': {
            char hex[3] = { p[1], p[1] ? p[2] : '\0', '\0' };
            out[n++] = (char)strtol(hex, NULL, 16);
            p += p[1] && p[2] ? 2 : 0;
            break;
        }
        default: out[n++] = *p;
        }
    }
    return n;
}

static void print_escaped(const char *bytes, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)bytes[i];
        if (c == '\n') fputs("\\n", stdout);
        else if (c == '\r') fputs("\\r", stdout);
        else if (c == '\\') fputs("\\\\", stdout);
        else if (c < 0x20 || c >= 0x7f) printf("\\x%02x", c);
        else putchar(c);
    }
}

int main(void)
{
    static char line[1 << 20], bytes[1 << 20];
    session_t *s = NULL;
    while (fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\n")] = '\0';
        char *arg = strchr(line, ' ');
        if (arg)
            *arg++ = '\0';
        if (strcmp(line, "service") == 0) {
            const service_t *svc = arg ? service_find(arg) : NULL;
            if (svc == NULL) {
                printf("no service %s\n", arg ? arg : "(none)");
                return 2;
            }
            session_free(s);
            s = session_new(svc);
            continue;
        }
        if (s == NULL) {
            printf("%s before any `service` line\n", line);
            return 2;
        }
        size_t room;
        if (strcmp(line, "read") == 0) {
            size_t n = unescape(arg ? arg : "", bytes);
            char *into = session_read_buf(s, &room);
            if (room < n) {
                printf("read refused: room %zu for %zu bytes\n", room, n);
                continue;
            }
            memcpy(into, bytes, n);
            session_did_read(s, n);
        } else if (strcmp(line, "fill") == 0) {
            long left = arg ? strtol(arg, &arg, 10) : 0, in = 0;
            char c = arg && *arg == ' ' ? arg[1] : 'x';
            while (left > 0) {
                char *into = session_read_buf(s, &room);
                if (room == 0)
                    break;
                size_t n = room < (size_t)left ? room : (size_t)left;
                memset(into, c, n);
                session_did_read(s, n);
                left -= (long)n;
                in += (long)n;
            }
            printf("filled %ld\n", in);
        } else if (strcmp(line, "room") == 0) {
            session_read_buf(s, &room);
            printf("room %zu\n", room);
        } else if (strcmp(line, "samebuf") == 0) {
            size_t again;
            char *first = session_read_buf(s, &room), *second = session_read_buf(s, &again);
            printf("%s\n", first == second && room == again ? "same" : "moved");
        } else if (strcmp(line, "write") == 0) {
            size_t offered;
            const char *out = session_write_buf(s, &offered);
            size_t n = arg && strcmp(arg, "all") != 0 ? strtoul(arg, NULL, 10) : offered;
            n = n < offered ? n : offered;
            printf("wrote ");
            print_escaped(out, n);
            putchar('\n');
            session_did_write(s, n);
        } else if (strcmp(line, "eof") == 0) {
            session_did_eof(s);
        } else if (strcmp(line, "done") == 0) {
            printf("done %d\n", session_done(s));
        } else if (strcmp(line, "pending") == 0) {
            printf("pending %zu\n", session_out_pending(s));
        } else if (line[0] != '\0' && line[0] != '#') {
            printf("unknown step %s\n", line);
            return 2;
        }
    }
    session_free(s);
    return 0;
}
