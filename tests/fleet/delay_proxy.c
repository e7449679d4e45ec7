/* SPDX-License-Identifier: MIT */
/*
 * delay_proxy: a TCP proxy that delays each direction by DELAY_MS, for
 * tests/fleet/check-fleet.sh (the test kernel has no sch_netem).
 *
 *   delay_proxy LISTEN_IP:PORT TARGET_IP:PORT DELAY_MS
 *
 * Every byte read from one side is written to the other no earlier than
 * DELAY_MS after it was read, in order.  SIGUSR1 stalls the proxy: nothing
 * is forwarded and new connections wait unaccepted (a partition that drops
 * nothing, as a link whose packets vanish looks to both ends); SIGUSR2 lets
 * it flow again, with what was held delivered in order.  SIGTERM ends it.
 * One thread, poll(); at most PX_MAX_PAIRS connections at a time (more wait
 * in the listen queue).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define PX_MAX_PAIRS 64
#define PX_CHUNK     16384

/* Bytes read at one time, held until due. */
struct px_chunk {
    struct px_chunk *next;
    int64_t due_ms;
    size_t len, off;
    char data[];
};

/* One direction: read from `from`, queued, written to `to`. */
struct px_dir {
    int from, to;
    struct px_chunk *head, *tail;
    int eof;        /* `from` ended: shut `to` down once the queue is empty */
};

struct px_pair {
    int used;
    struct px_dir dir[2];   /* [0] client -> target, [1] target -> client */
};

static volatile sig_atomic_t px_stalled, px_quit;
static struct px_pair px_pairs[PX_MAX_PAIRS];

static void px_signal(int sig)
{
    if (sig == SIGUSR1)
        px_stalled = 1;
    else if (sig == SIGUSR2)
        px_stalled = 0;
    else
        px_quit = 1;
}

static int64_t px_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int px_parse(const char *text, struct sockaddr_in *sa)
{
    char host[64];
    const char *colon = strrchr(text, ':');

    if (!colon || (size_t)(colon - text) >= sizeof(host))
        return -EINVAL;
    memcpy(host, text, (size_t)(colon - text));
    host[colon - text] = '\0';
    memset(sa, 0, sizeof(*sa));
    sa->sin_family = AF_INET;
    sa->sin_port = htons((uint16_t)atoi(colon + 1));
    if (inet_pton(AF_INET, host, &sa->sin_addr) != 1 || sa->sin_port == 0)
        return -EINVAL;
    return 0;
}

static void px_close_pair(struct px_pair *p)
{
    for (int d = 0; d < 2; d++) {
        struct px_chunk *c = p->dir[d].head, *next;

        for (; c; c = next) {
            next = c->next;
            free(c);
        }
    }
    close(p->dir[0].from);
    close(p->dir[0].to);
    memset(p, 0, sizeof(*p));
}

/* Connects to the target (blocking: it is one hop away in the test). */
static int px_accept(int lfd, const struct sockaddr_in *target)
{
    struct px_pair *p = NULL;
    int cfd, tfd = -1, one = 1, r;

    for (int i = 0; i < PX_MAX_PAIRS; i++)
        if (!px_pairs[i].used) {
            p = &px_pairs[i];
            break;
        }
    if (!p)
        return 0;
    cfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (cfd < 0)
        return errno == EAGAIN || errno == EINTR ? 0 : -errno;
    tfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (tfd < 0) {
        r = -errno;
        goto out;
    }
    if (connect(tfd, (const struct sockaddr *)target, sizeof(*target)) < 0) {
        r = -errno;
        goto out;
    }
    fcntl(tfd, F_SETFL, fcntl(tfd, F_GETFL) | O_NONBLOCK);
    setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(tfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    p->used = 1;
    p->dir[0] = (struct px_dir){ .from = cfd, .to = tfd };
    p->dir[1] = (struct px_dir){ .from = tfd, .to = cfd };
    return 0;
out:
    /* The target refused: the client sees its connection closed. */
    close(cfd);
    if (tfd >= 0)
        close(tfd);
    return r == -ECONNREFUSED ? 0 : r;
}

/* Reads what `from` has into a chunk due in delay_ms.  < 0: the pair ends. */
static int px_read(struct px_dir *d, int delay_ms)
{
    struct px_chunk *c = malloc(sizeof(*c) + PX_CHUNK);
    ssize_t n;

    if (!c)
        return -ENOMEM;
    n = read(d->from, c->data, PX_CHUNK);
    if (n <= 0) {
        int r = n < 0 ? -errno : 0;

        free(c);
        if (r == -EAGAIN || r == -EINTR)
            return 0;
        if (r < 0)
            return r;
        d->eof = 1;
        return 0;
    }
    c->next = NULL;
    c->due_ms = px_now_ms() + delay_ms;
    c->len = (size_t)n;
    c->off = 0;
    if (d->tail)
        d->tail->next = c;
    else
        d->head = c;
    d->tail = c;
    return 0;
}

/* Writes the chunks that are due.  < 0: the pair ends. */
static int px_write(struct px_dir *d, int64_t now)
{
    while (d->head && d->head->due_ms <= now) {
        struct px_chunk *c = d->head;
        ssize_t n = write(d->to, c->data + c->off, c->len - c->off);

        if (n < 0)
            return errno == EAGAIN || errno == EINTR ? 0 : -errno;
        c->off += (size_t)n;
        if (c->off < c->len)
            return 0;
        d->head = c->next;
        if (!d->head)
            d->tail = NULL;
        free(c);
    }
    if (d->eof && !d->head)
        return -ECONNRESET;
    return 0;
}

int main(int argc, char **argv)
{
    struct sockaddr_in listen_sa, target_sa;
    struct sigaction sa = { .sa_handler = px_signal };
    struct pollfd pfd[1 + 4 * PX_MAX_PAIRS];
    int lfd, one = 1, delay_ms;

    if (argc != 4 || px_parse(argv[1], &listen_sa) < 0 || px_parse(argv[2], &target_sa) < 0 ||
        (delay_ms = atoi(argv[3])) < 0) {
        fprintf(stderr, "Usage: delay_proxy LISTEN_IP:PORT TARGET_IP:PORT DELAY_MS\n");
        return 2;
    }
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGUSR2, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (lfd < 0 || setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        bind(lfd, (struct sockaddr *)&listen_sa, sizeof(listen_sa)) < 0 || listen(lfd, 128) < 0) {
        fprintf(stderr, "delay_proxy: %s: %s\n", argv[1], strerror(errno));
        return 1;
    }
    while (!px_quit) {
        int64_t now = px_now_ms(), wait = 1000;
        nfds_t n = 0;

        pfd[n++] = (struct pollfd){ .fd = lfd, .events = px_stalled ? 0 : POLLIN };
        /* poll() only wakes the loop: every socket is tried afterwards. */
        for (int i = 0; i < PX_MAX_PAIRS && !px_stalled; i++) {
            for (int d = 0; d < 2 && px_pairs[i].used; d++) {
                struct px_dir *dir = &px_pairs[i].dir[d];

                if (!dir->eof)
                    pfd[n++] = (struct pollfd){ .fd = dir->from, .events = POLLIN };
                if (dir->head && dir->head->due_ms <= now)
                    pfd[n++] = (struct pollfd){ .fd = dir->to, .events = POLLOUT };
                else if (dir->head && dir->head->due_ms - now < wait)
                    wait = dir->head->due_ms - now;
            }
        }
        if (poll(pfd, n, (int)wait) < 0 && errno != EINTR) {
            perror("delay_proxy: poll");
            return 1;
        }
        if (px_stalled)
            continue;
        if (pfd[0].revents & POLLIN)
            px_accept(lfd, &target_sa);
        now = px_now_ms();
        for (int i = 0; i < PX_MAX_PAIRS; i++) {
            for (int d = 0; d < 2 && px_pairs[i].used; d++) {
                struct px_dir *dir = &px_pairs[i].dir[d];

                if ((!dir->eof && px_read(dir, delay_ms) < 0) || px_write(dir, now) < 0) {
                    px_close_pair(&px_pairs[i]);
                    break;
                }
            }
        }
    }
    for (int i = 0; i < PX_MAX_PAIRS; i++)
        if (px_pairs[i].used)
            px_close_pair(&px_pairs[i]);
    close(lfd);
    return 0;
}
