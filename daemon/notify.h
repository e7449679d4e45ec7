/* SPDX-License-Identifier: MIT */
/*
 * notify: divvyd's side of systemd's service protocol, through libsystemd.
 * It tells the service manager READY=1 once divvyd serves, STATUS= lines for
 * `systemctl status`, WATCHDOG=1 pings from the main event loop while the
 * unit sets WatchdogSec=, and STOPPING=1 on the way out (sd_notify(3)).  It
 * also hands over the listening sockets systemd passed for socket activation
 * (sd_listen_fds(3)), so that srv adopts them instead of binding its own,
 * and keeps named fds in systemd's file descriptor store across restarts
 * (FDSTORE=1: notify_fdstore() sends one, notify_listen_fds() gives them back).
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

/* Whether notify_stopping() was called: the health checks' NOT_SERVING
 * (docs/rls.md "Health", /healthcheck).  Thread-safe. */
bool notify_is_stopping(void);

/*
 * Puts a copy of @fd in the service manager's file descriptor store under
 * @name, replacing whatever the store held under that name: it sends
 * "FDSTOREREMOVE=1\nFDNAME=<name>" then "FDSTORE=1\nFDNAME=<name>" with @fd
 * (sd_pid_notify_with_fds(3)).  systemd passes the fd back to the next divvyd
 * of the unit through $LISTEN_FDS/$LISTEN_FDNAMES (notify_listen_fds() puts
 * it in the stored array), as long as the unit sets FileDescriptorStoreMax=
 * (otherwise systemd drops it silently, as it does when it is not a service
 * manager that supports the store).  @name: 1..255 bytes of printable ASCII
 * without ':' (-EINVAL otherwise).  @fd stays ours (systemd keeps a dup).
 * 0 and nothing sent without $NOTIFY_SOCKET; 0 once sent; -errno when the
 * message cannot be sent.  Thread-safe.
 */
int notify_fdstore(int fd, const char *name);

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

/* One fd systemd gave back from the unit's file descriptor store (notify_fdstore()). */
struct notify_stored {
    int fd;                     /* FD_CLOEXEC set, flags otherwise as stored; -1 once adopted */
    char name[NOTIFY_NAME_MAX];         /* its FDNAME=, never "" */
};

/*
 * Takes the fds systemd passed ($LISTEN_FDS, $LISTEN_PID, $LISTEN_FDNAMES),
 * and unsets those variables so children do not inherit them.  Each is
 * either
 *   - a listening stream socket, Unix or TCP (socket activation): into
 *     *ret_listeners, made O_NONBLOCK; or
 *   - a stored fd: not a socket at all, with a name that no socket unit
 *     gives, i.e. not "" or "unknown" ($LISTEN_FDNAMES unset), not "stored"
 *     (FDSTORE=1 without FDNAME=: never ours), not ending in ".socket" (a
 *     socket unit's default FileDescriptorName=) and not the name of a
 *     listening socket passed with it (the socket unit's FileDescriptorName=,
 *     e.g. a ListenFIFO= beside ListenStream=): into *ret_stored.
 * Anything else is -EINVAL (a misconfigured socket unit: e.g. a datagram
 * socket, or an unnamed FIFO), with every passed fd closed.
 * On success *ret_listeners is a malloc'd array of *ret_n_listeners
 * listeners and *ret_stored one of *ret_n_stored stored fds (each NULL and 0
 * when there are none; the store keeps every fd sent under a name, so
 * several share one only if something else than notify_fdstore() sent
 * them).  The caller adopts an fd by copying it and setting the entry's fd
 * to -1, then frees each array with its free function, which closes the fds
 * nobody adopted.  Call once, from the main thread, before any thread
 * starts.  -ENOMEM, -EBADF, -EINVAL.
 */
int notify_listen_fds(struct notify_listener **ret_listeners, size_t *ret_n_listeners,
                      struct notify_stored **ret_stored, size_t *ret_n_stored);

/* Closes the stored fds still >= 0 and frees the array.  NULL-safe. */
void notify_stored_free(struct notify_stored *s, size_t n);

/* Index of the first stored fd in @s[0..n) named @name and not adopted yet, or -1. */
ssize_t notify_stored_find(const struct notify_stored *s, size_t n, const char *name);

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
