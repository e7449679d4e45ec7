/* SPDX-License-Identifier: MIT */
/*
 * Integration: Redis Sentinel master discovery (docs/redis.md "Sentinel").
 * Each test starts a real master and a real replica (`--replicaof`) on free
 * 127.0.0.1 ports, one real sentinel (`redis-server sentinel.conf
 * --sentinel`) watching them, and a strict-mode divvyd that knows only the
 * sentinels; on_redis_error is "closed", so an answer that did not come
 * from Redis is a denial and cannot pass for one that did.  Shown:
 *   - hits are decided in the master the sentinel names (the key is read
 *     back from the master), after an unreachable sentinel listed first,
 *     with the sentinel reached over its Unix socket with a password; a
 *     reload that changes the Sentinel settings keeps the running ones;
 *   - the master killed and the replica promoted (SENTINEL failover): divvyd
 *     asks again, follows, and keeps counting from the replicated state;
 *   - a failover with the old master alive: once Sentinel demotes it, divvyd
 *     follows to the new master;
 *   - the same with the old master never demoted (its ACL forbids REPLICAOF,
 *     so it stays a writable master and keeps every client): divvyd moves
 *     only because its +switch-master subscription says so, every worker
 *     leaves the old master, the breaker stays closed, and a window begun
 *     before the failover ends at exactly its limit on the new master;
 *   - a sentinel that names a replica: ROLE refuses it, the breaker opens,
 *     and divvyd recovers by itself once the sentinel names the master;
 *   - REDIS_HOST in the environment next to redis.sentinels stops divvyd.
 * Every server is stopped by PID even when an assertion fails (the
 * harness_redis.c registry); a missing `redis-server --sentinel` fails the
 * test with redis-server's own log, never skips it.
 */
#include <limits.h>
#include <signal.h>
#include <unistd.h>

#include "harness_redis.h"

#define WORKERS         2
#define REDIS_CONNS     (2 * WORKERS)   /* each worker's and each lane thread's */
#define TIMEOUT_MS      500
#define FOLLOW_MS       60000       /* generous: Sentinel demotes a live master after ~10 s */
#define LIMIT           5

static const char rules_text[] =
    "{ match = { path = \"/api\"; }; label = \"api\"; actor = \"user\";\n"
    "  credit_limit = 5; reset_seconds = 3600; },\n"
    "{ default = true; credit_limit = 0; reset_seconds = 0; }";

struct trio {
    struct redis_srv *master, *replica, *sentinel;
};

/* ---- Redis-side checks ------------------------------------------------------- */

/* Runs a command on @r; the reply (freeReplyObject()), or NULL. */
static redisReply *__attribute__((format(printf, 2, 3))) cmd(const struct redis_srv *r,
                                                             const char *fmt, ...)
{
    redisContext *c = redis_cli(r);
    redisReply *rep;
    va_list ap;

    if (!c)
        return NULL;
    va_start(ap, fmt);
    rep = redisvCommand(c, fmt, ap);
    va_end(ap);
    redisFree(c);
    return rep;
}

/* ROLE's first word ("master", "slave", "sentinel") into @buf, or "?". */
static const char *role_of(const struct redis_srv *r, char *buf, size_t size)
{
    redisReply *rep = cmd(r, "ROLE");

    snprintf(buf, size, "?");
    if (rep && rep->type == REDIS_REPLY_ARRAY && rep->elements &&
        rep->element[0]->type == REDIS_REPLY_STRING)
        snprintf(buf, size, "%s", rep->element[0]->str);
    if (rep)
        freeReplyObject(rep);
    return buf;
}

/* The port the sentinel gives for mymaster, or -1. */
static int sentinel_master_port(const struct redis_srv *s)
{
    redisReply *rep = cmd(s, "SENTINEL get-master-addr-by-name mymaster");
    int port = -1;

    if (rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 &&
        rep->element[1]->type == REDIS_REPLY_STRING)
        port = atoi(rep->element[1]->str);
    if (rep)
        freeReplyObject(rep);
    return port;
}

/* True once the sentinel lists a healthy replica on @port (a failover
 * needs one: -NOGOODSLAVE otherwise). */
static bool sentinel_knows_replica(const struct redis_srv *s, int port)
{
    redisReply *rep = cmd(s, "SENTINEL replicas mymaster");
    bool ok = false;

    for (size_t i = 0; rep && rep->type == REDIS_REPLY_ARRAY && i < rep->elements; i++) {
        const redisReply *f = rep->element[i];
        bool port_ok = false, flags_ok = false;

        for (size_t j = 0; f->type == REDIS_REPLY_ARRAY && j + 1 < f->elements; j += 2) {
            const char *k = f->element[j]->str, *v = f->element[j + 1]->str;

            if (!k || !v)
                continue;
            if (strcmp(k, "port") == 0)
                port_ok = atoi(v) == port;
            if (strcmp(k, "flags") == 0)
                flags_ok = strcmp(v, "slave") == 0;
        }
        ok |= port_ok && flags_ok;
    }
    if (rep)
        freeReplyObject(rep);
    return ok;
}

/* Polls @cond(@r, @arg) every 50 ms until true or @ms pass. */
static bool wait_for(bool (*cond)(const struct redis_srv *, int), const struct redis_srv *r,
                     int arg, int ms)
{
    uint64_t end = harness_now_ms() + (uint64_t)ms;

    while (!cond(r, arg)) {
        if (harness_now_ms() > end)
            return false;
        harness_pause_ms(50);
    }
    return true;
}

static bool in_sync(const struct redis_srv *r, int unused)
{
    (void)unused;
    return redis_replica_synced(r);
}

static bool names_port(const struct redis_srv *s, int port)
{
    return sentinel_master_port(s) == port;
}

static bool is_replica(const struct redis_srv *r, int unused)
{
    char role[32];

    (void)unused;
    return strcmp(role_of(r, role, sizeof(role)), "slave") == 0;
}

/* The value of divvy:{api:@user} in @r, or LLONG_MIN when absent. */
static long long used_in(const struct redis_srv *r, const char *user)
{
    return redis_int(r, "GET divvy:{api:%s}", user);
}

static bool has_alice_at_2(const struct redis_srv *r, int unused)
{
    (void)unused;
    return used_in(r, "alice") == 2;
}

static bool has_erin_at_2(const struct redis_srv *r, int unused)
{
    (void)unused;
    return used_in(r, "erin") == 2;
}

/* How many lines of CLIENT LIST on @r contain every one of @a and @b
 * (and not this query's own connection); -1 when it cannot be asked. */
static int clients_with(const struct redis_srv *r, const char *a, const char *b)
{
    redisReply *rep = cmd(r, "CLIENT LIST");
    int n = -1;

    if (rep && rep->type == REDIS_REPLY_STRING) {
        char *save = NULL;

        n = 0;
        for (char *l = strtok_r(rep->str, "\n", &save); l; l = strtok_r(NULL, "\n", &save))
            n += strstr(l, a) && strstr(l, b) && !strstr(l, "cmd=client|list");
    }
    if (rep)
        freeReplyObject(rep);
    return n;
}

/* divvyd's connections on @r: unnamed ordinary clients (Sentinel names its
 * own, a replica's link is flagged S). */
static int divvyd_clients_on(const struct redis_srv *r)
{
    return clients_with(r, " name= ", " flags=N ");
}

/* At least @n clients of the sentinel @s are subscribed to divvyd's four
 * channels (+switch-master and the promotion's, sentinel.h). */
static bool subscribers_at_least(const struct redis_srv *s, int n)
{
    return clients_with(s, " sub=4 ", " name= ") >= n;
}

static bool no_divvyd_on(const struct redis_srv *r, int unused)
{
    (void)unused;
    return divvyd_clients_on(r) == 0;
}

/*
 * A master, its replica in sync, and a sentinel watching the master as
 * "mymaster", with @sentinel_pass as its requirepass (NULL: none).  All
 * three belong to the registry.
 */
static void start_trio(struct trio *t, const char *sentinel_pass)
{
    struct redis_start_opts mo = { .tcp = true }, ro = { 0 }, so = { 0 };
    char conf[512];

    memset(t, 0, sizeof(*t));
    CHECK(redis_start_ex(&mo, &t->master));
    ro.replicaof = t->master->port;
    CHECK(redis_start_ex(&ro, &t->replica));
    if (!wait_for(in_sync, t->replica, 0, 20000))
        fail_msg("the replica never synced with the master");
    snprintf(conf, sizeof(conf),
             "sentinel monitor mymaster 127.0.0.1 %d 1\n"
             "sentinel down-after-milliseconds mymaster 1000\n"
             "sentinel failover-timeout mymaster 5000\n", t->master->port);
    so.sentinel_conf = conf;
    so.password = sentinel_pass;
    /* Fails loudly, with redis-server's log, when --sentinel is missing. */
    CHECK(redis_start_ex(&so, &t->sentinel));
}

static void stop_trio(struct trio *t)
{
    redis_stop(t->sentinel);
    redis_stop(t->replica);
    redis_stop(t->master);
}

/* ---- divvyd-side checks ------------------------------------------------------ */

/* A strict config (closed on errors) that knows only @sentinels (the text
 * inside [ ]) and @master, plus @extra inside redis { }.  free() it. */
static char *config_text(const char *sentinels, const char *master, const char *extra)
{
    char *conf = NULL;

    assert_true(asprintf(&conf,
                         "store = { mode = \"strict\"; on_redis_error = \"closed\"; };\n"
                         "redis = { sentinels = [ %s ]; master_name = \"%s\";\n"
                         "          timeout_ms = %d; %s };\n"
                         "rules = (\n%s\n);\n",
                         sentinels, master, TIMEOUT_MS, extra ? extra : "", rules_text) > 0);
    return conf;
}

static struct harness_daemon *start_divvyd(const char *sentinels, const char *extra)
{
    struct harness_daemon *d;
    char *conf = config_text(sentinels, "mymaster", extra);

    d = redis_divvyd(conf, WORKERS);
    free(conf);
    return d;
}

/* Polls divvyd's log until a line contains @needle, or fails after @ms. */
static void wait_log(struct harness_daemon *d, const char *needle, int ms)
{
    uint64_t end = harness_now_ms() + (uint64_t)ms;

    while (redis_divvyd_log_count(d, needle) == 0) {
        if (harness_now_ms() > end)
            fail_msg("divvyd never logged \"%s\"", needle);
        harness_pause_ms(20);
    }
}

/* divvyd logged the new master on @port once: the sentinel's answer, or
 * (Sentinel announces it first) the promotion it followed before the
 * sentinels named it; both are logged at most once per change. */
static void expect_named_once(struct harness_daemon *d, int port)
{
    char said[160], promoted[160];

    snprintf(said, sizeof(said), "says master mymaster is 127.0.0.1:%d", port);
    snprintf(promoted, sizeof(promoted), "announced the promotion of 127.0.0.1:%d to master "
             "mymaster", port);
    if (redis_divvyd_log_count(d, said) + redis_divvyd_log_count(d, promoted) < 1 || redis_divvyd_log_count(d, said) > 1 ||
        redis_divvyd_log_count(d, promoted) > 1)
        fail_msg("\"%s\" logged %d times, \"%s\" %d times", said, redis_divvyd_log_count(d, said), promoted,
                 redis_divvyd_log_count(d, promoted));
}

/* HIT path=/api user=@user must be allowed with @credit left. */
static void expect_allowed(struct harness_conn *c, const char *user, long long credit)
{
    char req[128], r[HARNESS_LINE];
    long long cr, secs;
    bool a;

    snprintf(req, sizeof(req), "HIT path=/api user=%s", user);
    CHECK(harness_cmd(c, req, r, sizeof(r)));
    if (harness_parse_ok(r, &a, &cr, &secs) < 0 || !a || cr != credit)
        fail_msg("%s -> \"%s\", want OK true %lld", req, r, credit);
}

/* @user's whole window through @c, decided in @master: LIMIT hits allowed
 * with the credit counting down, the next denied, the key at LIMIT. */
static void expect_strict_window(struct harness_conn *c, const char *user,
                                 const struct redis_srv *master)
{
    char req[128];

    for (int i = 1; i <= LIMIT; i++) {
        expect_allowed(c, user, LIMIT - i);
        assert_int_equal(used_in(master, user), i);
    }
    snprintf(req, sizeof(req), "HIT path=/api user=%s", user);
    EXPECT_OK(c, req, false, 0, 0, 3600);
    assert_int_equal(used_in(master, user), LIMIT);
}

/* Sends HIT for @user until it is allowed with @credit (a denial is the
 * closed policy while divvyd has no master), for up to @ms. */
static void hit_until_allowed(struct harness_conn *c, const char *user, long long credit, int ms)
{
    uint64_t end = harness_now_ms() + (uint64_t)ms;
    char req[128], r[HARNESS_LINE];
    long long cr, secs;
    bool a;

    snprintf(req, sizeof(req), "HIT path=/api user=%s", user);
    for (;;) {
        CHECK(harness_cmd(c, req, r, sizeof(r)));
        if (harness_parse_ok(r, &a, &cr, &secs) == 0 && a && cr == credit)
            return;
        if (harness_parse_ok(r, &a, &cr, &secs) < 0 || a || cr != 0)
            fail_msg("%s -> \"%s\": neither OK true %lld nor the closed policy's denial",
                     req, r, credit);
        if (harness_now_ms() > end)
            fail_msg("%s still denied after %d ms: divvyd did not follow the master", req, ms);
        harness_pause_ms(50);
    }
}

/* ---- tests ------------------------------------------------------------------- */

/* (1) Discovery: an unreachable sentinel first, then the real one over its
 * Unix socket with AUTH; hits are decided in the master it names, requests
 * sent at once wait for discovery instead of falling back.  The Sentinel
 * settings are read at start: a reload that changes them says so and
 * keeps the running ones. */
static void test_redis_sentinel_strict(void **state)
{
    struct harness_daemon *d;
    struct harness_conn *c;
    struct trio t;
    char list[HARNESS_PATH * 2], said[HARNESS_PATH * 2], role[32], *conf;
    int dead = harness_free_port(SOCK_STREAM);
    uint64_t end;

    (void)state;
    CHECK(dead);
    start_trio(&t, "sentinel-secret");
    snprintf(list, sizeof(list), "\"127.0.0.1:%d\", \"unix:%s\"", dead, t.sentinel->sock);
    d = start_divvyd(list, "sentinel_password = \"sentinel-secret\";");
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    expect_allowed(c, "alice", 4);
    expect_allowed(c, "alice", 3);
    expect_allowed(c, "alice", 2);
    /* The master holds the count; the replica is only a copy of it. */
    assert_string_equal(role_of(t.master, role, sizeof(role)), "master");
    assert_int_equal(used_in(t.master, "alice"), 3);
    expect_strict_window(c, "bob", t.master);
    redis_divvyd_wait_stat(d, "redis_connections", REDIS_CONNS, 10000);
    assert_int_equal(redis_divvyd_stat(d, "redis_breaker_trips"), 0);
    assert_int_equal(redis_divvyd_stat(d, "redis_fallbacks"), 0);
    /* Every worker asked; the master was logged once, with the sentinel that said so. */
    snprintf(said, sizeof(said), "redis: sentinel unix:%s says master mymaster is 127.0.0.1:%d",
             t.sentinel->sock, t.master->port);
    assert_int_equal(redis_divvyd_log_count(d, said), 1);

    /* Reloaded with only the dead sentinel and another name: not applied. */
    snprintf(list, sizeof(list), "\"127.0.0.1:%d\"", dead);
    conf = config_text(list, "othermaster", NULL);
    CHECK(harness_write_config(d, conf));
    free(conf);
    CHECK(harness_kill(d, SIGHUP));
    end = harness_now_ms() + 10000;
    while (harness_log_contains(d, "take effect only after a restart") != 1) {
        if (harness_now_ms() > end)
            fail_msg("the reload never said the redis settings need a restart");
        harness_pause_ms(20);
    }
    expect_allowed(c, "carol", 4);
    assert_int_equal(used_in(t.master, "carol"), 1);
    assert_int_equal(redis_divvyd_stat(d, "redis_breaker_trips"), 0);
    harness_close(c);
    redis_divvyd_stop(d);
    stop_trio(&t);
}

/* (2) The master dies; Sentinel promotes the replica.  divvyd loses its
 * connections, asks again until the sentinel names the new master, and
 * goes on from the state the replica had copied. */
static void test_redis_sentinel_master_killed(void **state)
{
    struct harness_daemon *d;
    struct harness_conn *c, *cs[4];
    struct trio t;
    char list[64], user[16];
    redisReply *rep;

    (void)state;
    start_trio(&t, NULL);
    if (!wait_for(sentinel_knows_replica, t.sentinel, t.replica->port, 20000))
        fail_msg("the sentinel never listed the replica");
    snprintf(list, sizeof(list), "\"127.0.0.1:%d\"", t.sentinel->port);
    d = start_divvyd(list, NULL);
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    expect_allowed(c, "alice", 4);
    expect_allowed(c, "alice", 3);
    assert_int_equal(used_in(t.master, "alice"), 2);
    /* The replica has it before the master goes (polled: WAIT on a
     * connection of its own would not wait for divvyd's writes). */
    if (!wait_for(has_alice_at_2, t.replica, 0, 20000))
        fail_msg("the replica never got alice's count");

    redis_kill(t.master);
    rep = cmd(t.sentinel, "SENTINEL failover mymaster");
    if (!rep || rep->type != REDIS_REPLY_STATUS)
        fail_msg("SENTINEL failover: %s", rep && rep->str ? rep->str : "no reply");
    freeReplyObject(rep);
    if (!wait_for(names_port, t.sentinel, t.replica->port, 30000))
        fail_msg("the sentinel never named the replica as master");

    /* divvyd follows: alice's third hit is counted in the promoted replica. */
    hit_until_allowed(c, "alice", 2, FOLLOW_MS);
    assert_int_equal(used_in(t.replica, "alice"), 3);
    redis_divvyd_wait_stat(d, "redis_connections", REDIS_CONNS, 10000);
    assert_true(redis_divvyd_stat(d, "redis_breaker_trips") >= 1);
    /* Strict again, on every worker: a window per connection, all in the new master. */
    for (int i = 0; i < 4; i++)
        CHECK(harness_connect(d, HARNESS_UNIX, &cs[i]));
    for (int i = 0; i < 4; i++) {
        snprintf(user, sizeof(user), "w%d", i);
        expect_strict_window(cs[i], user, t.replica);
    }
    expect_allowed(c, "alice", 1);
    expect_allowed(c, "alice", 0);
    assert_int_equal(used_in(t.replica, "alice"), 5);
    expect_named_once(d, t.replica->port);
    assert_int_equal(harness_log_contains(d, "breaker closed"), 1);
    for (int i = 0; i < 4; i++)
        harness_close(cs[i]);
    harness_close(c);
    redis_divvyd_stop(d);
    stop_trio(&t);
}

/* (2b) A failover while the old master still runs: Sentinel demotes it
 * (and drops its clients) some seconds later; divvyd ends up on the new
 * master, strict on every worker. */
static void test_redis_sentinel_failover_live(void **state)
{
    struct harness_daemon *d;
    struct harness_conn *c, *cs[4];
    struct trio t;
    char list[64], user[16];
    redisReply *rep;

    (void)state;
    start_trio(&t, NULL);
    if (!wait_for(sentinel_knows_replica, t.sentinel, t.replica->port, 20000))
        fail_msg("the sentinel never listed the replica");
    snprintf(list, sizeof(list), "\"127.0.0.1:%d\"", t.sentinel->port);
    d = start_divvyd(list, NULL);
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    expect_allowed(c, "carol", 4);
    assert_int_equal(used_in(t.master, "carol"), 1);

    rep = cmd(t.sentinel, "SENTINEL failover mymaster");
    if (!rep || rep->type != REDIS_REPLY_STATUS)
        fail_msg("SENTINEL failover: %s", rep && rep->str ? rep->str : "no reply");
    freeReplyObject(rep);
    if (!wait_for(names_port, t.sentinel, t.replica->port, 30000))
        fail_msg("the sentinel never named the replica as master");
    /* Until Sentinel demotes the old master both claim to be masters
     * (docs/redis.md "Sentinel"); once it has, divvyd must be on the new one. */
    if (!wait_for(is_replica, t.master, 0, FOLLOW_MS))
        fail_msg("Sentinel never demoted the old master");
    for (int k = 0;; k++) {
        snprintf(user, sizeof(user), "p%d", k);
        hit_until_allowed(c, user, 4, FOLLOW_MS);
        if (used_in(t.replica, user) == 1)
            break;
        if (k > 200)
            fail_msg("hits never reached the new master");
        harness_pause_ms(50);
    }
    redis_divvyd_wait_stat(d, "redis_connections", REDIS_CONNS, 10000);
    for (int i = 0; i < 4; i++)
        CHECK(harness_connect(d, HARNESS_UNIX, &cs[i]));
    for (int i = 0; i < 4; i++) {
        snprintf(user, sizeof(user), "v%d", i);
        expect_strict_window(cs[i], user, t.replica);
    }
    expect_named_once(d, t.replica->port);
    for (int i = 0; i < 4; i++)
        harness_close(cs[i]);
    harness_close(c);
    redis_divvyd_stop(d);
    stop_trio(&t);
}

/* (2c) A failover whose old master stays a master for good: its ACL
 * forbids REPLICAOF, so Sentinel can neither demote it nor (in the same
 * MULTI) drop its clients.  The failover is run by a second sentinel that
 * divvyd does not know, so the one divvyd watches never announces the
 * promotion (only the sentinel leading a failover does) and learns of it
 * from the other: only its +switch-master can move divvyd.  The log says
 * it heard it, every worker's connection leaves the old master while it
 * still claims to be one, no breaker opens (a switch is not a failure), and
 * erin's window, begun on the old master and copied before the failover,
 * ends at exactly its limit on the new one. */
static void test_redis_sentinel_switch_event(void **state)
{
    struct harness_daemon *d;
    struct harness_conn *c;
    struct redis_srv *other;
    struct redis_start_opts so = { 0 };
    struct trio t;
    char list[64], heard[192], user[16], req[64], r[HARNESS_LINE], role[32], conf[256];
    long long cr, secs;
    redisReply *rep;
    uint64_t end;
    bool a;

    (void)state;
    start_trio(&t, NULL);
    snprintf(conf, sizeof(conf), "sentinel monitor mymaster 127.0.0.1 %d 1\n"
             "sentinel failover-timeout mymaster 5000\n", t.master->port);
    so.sentinel_conf = conf;
    CHECK(redis_start_ex(&so, &other));
    if (!wait_for(sentinel_knows_replica, other, t.replica->port, 20000))
        fail_msg("the sentinel never listed the replica");
    rep = cmd(t.master, "ACL SETUSER default -replicaof -slaveof");
    if (!rep || rep->type != REDIS_REPLY_STATUS)
        fail_msg("ACL SETUSER: %s", rep && rep->str ? rep->str : "no reply");
    freeReplyObject(rep);
    snprintf(list, sizeof(list), "\"127.0.0.1:%d\"", t.sentinel->port);
    d = start_divvyd(list, NULL);
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    expect_allowed(c, "erin", 4);
    expect_allowed(c, "erin", 3);
    assert_int_equal(used_in(t.master, "erin"), 2);
    redis_divvyd_wait_stat(d, "redis_connections", REDIS_CONNS, 10000);
    /* Every worker is on the old master and subscribed to the sentinel. */
    if (!wait_for(subscribers_at_least, t.sentinel, REDIS_CONNS, 20000))
        fail_msg("divvyd's workers never subscribed to the sentinel");
    assert_int_equal(divvyd_clients_on(t.master), REDIS_CONNS);
    if (!wait_for(has_erin_at_2, t.replica, 0, 20000))
        fail_msg("the replica never got erin's count");

    rep = cmd(other, "SENTINEL failover mymaster");
    if (!rep || rep->type != REDIS_REPLY_STATUS)
        fail_msg("SENTINEL failover: %s", rep && rep->str ? rep->str : "no reply");
    freeReplyObject(rep);
    /* Hits go on during the switch: each a fresh user, so each is either
     * decided by a master (OK true 4) or failed in flight (the closed
     * policy's denial); which master counted it does not matter here. */
    snprintf(heard, sizeof(heard),
             "announced +switch-master: master mymaster is 127.0.0.1:%d (was 127.0.0.1:%d)",
             t.replica->port, t.master->port);
    end = harness_now_ms() + FOLLOW_MS;
    for (int k = 0; redis_divvyd_log_count(d, heard) == 0; k++) {
        if (harness_now_ms() > end)
            fail_msg("divvyd never logged \"%s\"", heard);
        snprintf(user, sizeof(user), "q%d", k);
        snprintf(req, sizeof(req), "HIT path=/api user=%s", user);
        CHECK(harness_cmd(c, req, r, sizeof(r)));
        if (harness_parse_ok(r, &a, &cr, &secs) < 0 || (a && cr != 4) || (!a && cr != 0))
            fail_msg("%s -> \"%s\" during the switch", req, r);
        harness_pause_ms(20);
    }
    wait_log(d, heard, FOLLOW_MS);
    assert_int_equal(redis_divvyd_log_count(d, heard), 1);
    /* Every worker left the old master, which still is one and kept its
     * other clients: the event moved divvyd, nothing else did. */
    if (!wait_for(no_divvyd_on, t.master, 0, 20000))
        fail_msg("divvyd still has %d connection(s) on the old master",
                 divvyd_clients_on(t.master));
    assert_string_equal(role_of(t.master, role, sizeof(role)), "master");
    redis_divvyd_wait_stat(d, "redis_connections", REDIS_CONNS, 10000);
    hit_until_allowed(c, "late", 4, FOLLOW_MS);
    assert_int_equal(used_in(t.replica, "late"), 1);
    assert_int_equal(used_in(t.master, "late"), LLONG_MIN);
    /* erin: 2 before the failover (copied), 3 now, then no more. */
    expect_allowed(c, "erin", 2);
    expect_allowed(c, "erin", 1);
    expect_allowed(c, "erin", 0);
    EXPECT_OK(c, "HIT path=/api user=erin", false, 0, 0, 3600);
    assert_int_equal(used_in(t.replica, "erin"), LIMIT);
    assert_int_equal(used_in(t.master, "erin"), 2);
    assert_int_equal(redis_divvyd_stat(d, "redis_breaker_trips"), 0);
    assert_int_equal(divvyd_clients_on(t.master), 0);
    assert_string_equal(role_of(t.master, role, sizeof(role)), "master");
    assert_int_equal(harness_log_contains(d, "announced the promotion"), 0);
    harness_close(c);
    redis_divvyd_stop(d);
    redis_stop(other);
    stop_trio(&t);
}

/* (2d) A sentinel that names a replica (here: one watching the replica's
 * port): ROLE says "slave", so the connect fails, the breaker opens and no
 * hit is decided there; once the sentinel names the master, divvyd follows
 * by itself. */
static void test_redis_sentinel_replica_refused(void **state)
{
    struct harness_daemon *d;
    struct harness_conn *c;
    struct trio t;
    char list[64];
    redisReply *rep;

    (void)state;
    start_trio(&t, NULL);
    /* start_trio() watched the master; now the sentinel watches the replica. */
    rep = cmd(t.sentinel, "SENTINEL REMOVE mymaster");
    assert_non_null(rep);
    freeReplyObject(rep);
    rep = cmd(t.sentinel, "SENTINEL MONITOR mymaster 127.0.0.1 %d 1", t.replica->port);
    if (!rep || rep->type != REDIS_REPLY_STATUS)
        fail_msg("SENTINEL MONITOR: %s", rep && rep->str ? rep->str : "no reply");
    freeReplyObject(rep);
    assert_int_equal(sentinel_master_port(t.sentinel), t.replica->port);

    snprintf(list, sizeof(list), "\"127.0.0.1:%d\"", t.sentinel->port);
    d = start_divvyd(list, NULL);
    CHECK(harness_connect(d, HARNESS_UNIX, &c));
    EXPECT_OK(c, "HIT path=/api user=dave", false, 0, 0, 0);
    redis_divvyd_wait_stat(d, "redis_breaker_trips", 1, 10000);
    /* The first trip may be a deadline on a slow machine; ROLE's answer follows. */
    wait_log(d, "not a master: ROLE says slave", 10000);
    assert_int_equal(redis_divvyd_stat(d, "redis_connections"), 0);
    EXPECT_OK(c, "HIT path=/api user=dave", false, 0, 0, 0);
    assert_int_equal(used_in(t.replica, "dave"), LLONG_MIN);
    assert_int_equal(used_in(t.master, "dave"), LLONG_MIN);

    /* The sentinel is put right: divvyd retries, asks again, and follows. */
    rep = cmd(t.sentinel, "SENTINEL REMOVE mymaster");
    assert_non_null(rep);
    freeReplyObject(rep);
    rep = cmd(t.sentinel, "SENTINEL MONITOR mymaster 127.0.0.1 %d 1", t.master->port);
    assert_true(rep && rep->type == REDIS_REPLY_STATUS);
    freeReplyObject(rep);
    hit_until_allowed(c, "dave", 4, FOLLOW_MS);
    assert_int_equal(used_in(t.master, "dave"), 1);
    assert_int_equal(harness_log_contains(d, "breaker closed"), 1);
    harness_close(c);
    redis_divvyd_stop(d);
    stop_trio(&t);
}

/* REDIS_HOST would be ignored next to redis.sentinels: divvyd refuses to start. */
static void test_redis_sentinel_env_refused(void **state)
{
    char dir[] = "/tmp/divvy-sentinel-env.XXXXXX", conf[64], sock[64], out[256], err[2048];
    const char *args[] = { "-c", conf, "-s", dir, "-l", sock, NULL };
    FILE *f;
    int status = -1;

    (void)state;
    assert_non_null(mkdtemp(dir));
    snprintf(conf, sizeof(conf), "%s/divvy.conf", dir);
    snprintf(sock, sizeof(sock), "unix:%s/divvy.sock", dir);
    f = fopen(conf, "we");
    assert_non_null(f);
    fprintf(f, "redis = { sentinels = [ \"127.0.0.1:26379\" ]; master_name = \"m\"; };\n"
               "rules = (\n%s\n);\n", rules_text);
    fclose(f);
    setenv("REDIS_HOST", "127.0.0.1", 1);
    CHECK(harness_run_divvyd(args, 10000, &status, out, sizeof(out), err, sizeof(err)));
    unsetenv("REDIS_HOST");
    unlink(conf);
    unlink(sock + 5);
    rmdir(dir);
    assert_int_not_equal(status, 0);
    if (!strstr(err, "REDIS_HOST=127.0.0.1 cannot be used with redis.sentinels"))
        fail_msg("unexpected stderr: %s", err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_redis_sentinel_strict, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_redis_sentinel_master_killed, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_redis_sentinel_failover_live, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_redis_sentinel_switch_event, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_redis_sentinel_replica_refused, harness_setup,
                                        redis_teardown),
        cmocka_unit_test_setup_teardown(test_redis_sentinel_env_refused, harness_setup,
                                        redis_teardown),
    };

    return cmocka_run_group_tests_name("redis_sentinel", tests, NULL, NULL);
}
