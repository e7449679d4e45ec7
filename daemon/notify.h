/* SPDX-License-Identifier: MIT */
/*
 * notify: divvyd's side of systemd's service protocol, through libsystemd.
 * It tells the service manager READY=1 once divvyd serves, STATUS= lines for
 * `systemctl status`, WATCHDOG=1 pings from the main event loop while the
 * unit sets WatchdogSec=, and STOPPING=1 on the way out (sd_notify(3)).  It
 * also hands over the listening sockets systemd passed for socket activation
 * (sd_listen_fds(3)), so that srv adopts them instead of binding its own.
 *
 * Without systemd ($NOTIFY_SOCKET, $WATCHDOG_USEC and $LISTEN_FDS unset)
 * every call is a cheap no-op, so divvyd behaves the same in a terminal.
 * The module owns no global state: libsystemd reads the environment each
 * time.  Owns the watchdog's timer event, nothing else.  Never logs except
 * when the watchdog withholds a ping (a stuck worker).
 */
#ifndef DIVVY_NOTIFY_H
#define DIVVY_NOTIFY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define NOTIFY_NAME_MAX     256     /* FileDescriptorName= is at most 255 bytes */
#define NOTIFY_ADDRESS_MAX  128     /* "unix:" + sun_path, "tcp:[V6]:PORT" */

/* ---- sd_notify --------------------------------------------------------------- */

/* READY=1 plus STATUS=<formatted text>: call once the listeners and the
 * tables are up and the workers run.  Thread-safe. */
void notify_ready(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* STATUS=<formatted text> (one line: newlines become spaces).  Thread-safe. */
void notify_status(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* STOPPING=1: call when a stop begins (SIGTERM/SIGINT).  Thread-safe. */
void notify_stopping(void);

/* WATCHDOG=1 now.  Thread-safe; notify_watchdog_new() calls it for you. */
void notify_watchdog_ping(void);

/* The unit's watchdog interval in microseconds ($WATCHDOG_USEC, honoured
 * only when $WATCHDOG_PID is unset or ours), or 0 when there is none. */
uint64_t notify_watchdog_usec(void);

/* ---- watchdog ---------------------------------------------------------------- */

struct event_base;
struct notify_watchdog;

/*
 * When the unit has a watchdog, adds a persistent timer to @base (the main
 * loop) that sends WATCHDOG=1 every half interval, so a wedged main loop
 * gets divvyd restarted.  @alive (optional) is asked before each ping, in
 * the loop's thread: returning false withholds the ping (and logs, rate-
 * limited), so a stuck worker gets the daemon restarted too.  *ret is the
 * timer, or NULL when there is no watchdog (not an error).  -ENOMEM.
 */
int notify_watchdog_new(struct event_base *base, bool (*alive)(void *userdata), void *userdata,
                        struct notify_watchdog **ret);

/* Stops and frees the timer; call before freeing @base.  NULL-safe. */
void notify_watchdog_free(struct notify_watchdog *wd);

/* ---- socket activation -------------------------------------------------------- */

/* One listening socket systemd passed. */
struct notify_listener {
    int fd;                     /* listening, O_NONBLOCK and FD_CLOEXEC set; -1 once adopted */
    bool is_unix;
    char name[NOTIFY_NAME_MAX];         /* FileDescriptorName=, or "" */
    char address[NOTIFY_ADDRESS_MAX];   /* "unix:PATH", "tcp:HOST:PORT", "tcp:[V6]:PORT" */
};

/*
 * Takes the sockets systemd passed ($LISTEN_FDS, $LISTEN_PID,
 * $LISTEN_FDNAMES), and unsets those variables so children do not inherit
 * them.  Every one must be a listening stream socket, Unix or TCP; anything
 * else is -EINVAL (a misconfigured socket unit), with every passed fd closed.
 * On success *ret is a malloc'd array of *ret_n listeners (NULL and 0 when
 * not socket-activated).  The caller adopts an fd by copying it and setting
 * the entry's fd to -1, then frees the array with notify_listeners_free(),
 * which closes the fds nobody adopted.  Call once, from the main thread,
 * before any thread starts.  -ENOMEM, -EBADF.
 */
int notify_listen_fds(struct notify_listener **ret, size_t *ret_n);

/* Closes the fds still >= 0 and frees the array.  NULL-safe. */
void notify_listeners_free(struct notify_listener *l, size_t n);

/*
 * Index of the listener in @l[0..n) bound to @address ("unix:PATH", or
 * "tcp:HOST:PORT" with a numeric or resolvable HOST; "tcp:[V6]:PORT"), or
 * -1 when none is.  Lets srv skip binding an address systemd already
 * passed.  TCP addresses are compared as socket addresses, Unix ones as
 * paths.
 */
ssize_t notify_listeners_find(const struct notify_listener *l, size_t n, const char *address);

#endif
