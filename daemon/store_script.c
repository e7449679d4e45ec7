/* SPDX-License-Identifier: MIT */
/*
 * store_script: the Lua scripts divvyd runs in Redis and their typed calls
 * (see store_script.h, docs/redis.md "Scripts").  Each script's text is
 * followed by the function that packs its ARGV, so a reader checks the
 * positions against the Lua in one screen; the replies are decoded in
 * store_reply.c, one shape per kind of script.  The scripts are embedded here, so
 * nothing depends on an install path; their SHA-1s (FIPS 180-4, below) are
 * the names EVALSHA uses.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "algo.h"
#include "store_script.h"
#include "store_script_lua.h"

/* A key of another type (a labelled rule whose algorithm changed) starts afresh. */
#define LUA_HMGET(mode, fields)                                                      \
    "local st = " KV(mode, HMGET) fields ")\n"                                       \
    "if st.err then " KV(mode, DEL) "); st = {} end\n"

/* A window key's value (@got): the count used, and debt true when it holds
 * a DEBIT's debt, marked by a fraction (".5"): a reader without the mark,
 * or from before debts, reads a count above the limit (a limit since
 * lowered) as "nothing left until the PTTL", as ever. */
#define LUA_WINDOW_GET                                                               \
    "local used = tonumber(got)\n"                                                   \
    "local debt = used ~= nil and used ~= math.floor(used)\n"                        \
    "if debt then used = math.floor(used) end\n"

/* A window key in debt (used > limit and the mark, docs/dev/shm.md "Algorithm
 * state"): its PTTL runs to the start of the first window with a full quota
 * again, each window that ends pays one limit back.  In: key, used, debt,
 * limit, reset and ttl (the key's PTTL); out (locals the caller declares):
 * used and left (ms to the current window's end) in the current window,
 * carried true when windows were paid. */
#define LUA_WINDOW_CARRY                                                             \
    "left, carried = ttl, false\n"                                                    \
    "if used > limit and not debt then used = limit end\n"                           \
    "if used > limit then\n"                                                         \
    "  left = ttl - (math.ceil(used / limit) - 1) * reset\n"                           \
    "  if left <= 0 then\n"                                                          \
    "    local k = math.floor(-left / reset) + 1\n"                                  \
    "    used, left, carried = used - k * limit, left + k * reset, true\n"           \
    "  end\n"                                                                        \
    "end\n"                                                                          \
    "if used < 0 then used = 0 end\n"

/* A DEBIT's debt is at most ALGO_DEBT_WINDOWS limits, as in divvyd's table
 * (common/algo.h): LUA_DEBT_MOST is the most a key may hold as used. */
#define LUA_DEBT_MOST "(" LUA_STR(ALGO_DEBT_WINDOWS) " + 1) * limit"

/* Writes used (any size) in the window ending in @left ms: the key's PTTL
 * runs to its debt's end.  The debt saturates at ALGO_DEBT_WINDOWS limits,
 * or where its pay-back would pass 2^39 ms. */
#define LUA_WINDOW_SET(mode)                                                         \
    "local most = (math.floor(549755813888 / reset) + 1) * limit\n"                  \
    "if most > " LUA_DEBT_MOST " then most = " LUA_DEBT_MOST " end\n"                \
    "if used > most then used = most end\n"                                          \
    "local m = 1\n"                                                                  \
    "if used > limit then m = math.ceil(used / limit) end\n"                         \
    "local v = used\n"                                                               \
    "if used > limit then v = string.format('%.0f', used) .. '.5' end\n"             \
    KV(mode, SET) "v, 'PX', left + (m - 1) * reset)\n"

/* The ms to the end of a window that starts now (first): reset_ms, or for a
 * calendar window (ARGV[5..7] the host's period start and end and the next
 * period's end, Unix ms; absent otherwise) the end of the period Redis's clock is
 * in, so every host's hits start the same period at the same Redis instant
 * (docs/redis.md "Calendar windows"); a host more than a period behind
 * Redis gets a window of the nominal reset_ms. */
#define LUA_WINDOW_FIRST                                                             \
    "local first = reset\n"                                                          \
    "local cal = tonumber(ARGV[5])\n"                                                \
    "if cal and cal > 0 then\n"                                                      \
    LUA_NOW                                                                          \
    "  local e = tonumber(ARGV[6])\n"                                                \
    "  if now < cal then e = cal elseif now >= e then e = tonumber(ARGV[7]) end\n"    \
    "  first = e - now\n"                                                            \
    "  if first < 1 then first = reset end\n"                                        \
    "end\n"

#define LUA_WINDOW(mode)                                                             \
    "-- divvy window: KEYS[1] = credit used in the window, its PTTL the window's end\n" \
    "-- (in debt: the end of the window that has a full quota again).\n"             \
    "-- ARGV: op (take|peek|debit), n, limit, reset_ms -> {allowed, credit, ms to reset}\n" \
    "local key = KEYS[1]\n"                                                          \
    "local limit, reset = tonumber(ARGV[3]), tonumber(ARGV[4])\n"                    \
    LUA_WINDOW_FIRST                                                                 \
    KV(mode, LAYER)                                                                  \
    "local function decide(op, n)\n"                                                 \
    "local debit = op == 'debit'\n"                                                  \
    "local got = " KV(mode, GET) ")\n"                                               \
    "if type(got) == 'table' and got.err then " KV(mode, DEL) "); got = false end\n" \
    LUA_WINDOW_GET                                                                   \
    "if not used then\n"                                                             \
    "  if debit and n > limit then\n"                                                \
    "    local left, used = first, n\n"                                              \
    LUA_WINDOW_SET(mode)                                                             \
    "    return {0, 0, first}\n"                                                     \
    "  end\n"                                                                        \
    "  if (op == 'take' or debit) and n <= limit then\n"                             \
    "    " KV(mode, SET) "n, 'PX', first)\n"                                        \
    "    return {1, limit - n, first}\n"                                             \
    "  end\n"                                                                        \
    "  if n <= limit then return {1, limit, 0} end\n"                                \
    "  return {0, limit, 0}\n"                                                       \
    "end\n"                                                                          \
    "local ttl = " KV(mode, PTTL) ")\n"                                              \
    "if ttl < 0 then\n"                                                              \
    "  " KV(mode, PEXPIRE) "first)\n"                                                \
    "  ttl = first\n"                                                                \
    "end\n"                                                                          \
    "local left, carried\n"                                                          \
    LUA_WINDOW_CARRY                                                                 \
    "local fits = used <= limit and n <= limit - used\n"                             \
    "if debit or (fits and op == 'take') then\n"                                     \
    "  if debit or carried then\n"                                                   \
    "    used = used + n\n"                                                          \
    LUA_WINDOW_SET(mode)                                                             \
    "  else\n"                                                                       \
    "    " KV(mode, INCRBY) "n)\n"                                                  \
    "    used = used + n\n"                                                          \
    "  end\n"                                                                        \
    "end\n"                                                                          \
    "local credit = 0\n"                                                             \
    "if used <= limit then credit = limit - used end\n"                              \
    "if (debit and used <= limit) or (not debit and fits) then return {1, credit, left} end\n" \
    "return {0, credit, left}\n"                                                     \
    "end\n"

static const char lua_window[] = LUA_WINDOW(ONE) LUA_ONE;
static const char lua_window_many[] = LUA_WINDOW(MANY) LUA_MANY;

static const char *op_arg(enum store_op op)
{
    return op == STORE_PEEK ? "peek" : op == STORE_DEBIT ? "debit" : "take";
}

/* Appends one argument: every ARGV entry is written through here, so none
 * can land past the call's STORE_SCRIPT_ARGV_MAX. */
static void arg_str(struct store_call *c, const char *s)
{
    if (c->argc < STORE_SCRIPT_ARGV_MAX)
        snprintf(c->argv[c->argc++], STORE_SCRIPT_ARG_SIZE, "%s", s);
}

static void arg_u64(struct store_call *c, uint64_t v)
{
    if (c->argc < STORE_SCRIPT_ARGV_MAX)
        snprintf(c->argv[c->argc++], STORE_SCRIPT_ARG_SIZE, "%" PRIu64, v);
}

static void arg_i64(struct store_call *c, int64_t v)
{
    if (c->argc < STORE_SCRIPT_ARGV_MAX)
        snprintf(c->argv[c->argc++], STORE_SCRIPT_ARG_SIZE, "%" PRId64, v);
}

static void call_init(struct store_call *c, enum store_script script)
{
    c->script = script;
    c->argc = 0;
    c->list = NULL;
    c->list_len = 0;
}

void store_script_window(const struct store_window_args *a, struct store_call *ret)
{
    call_init(ret, STORE_SCRIPT_WINDOW);
    arg_str(ret, op_arg(a->op));        /* ARGV[1] */
    arg_u64(ret, a->n);                 /* ARGV[2] */
    arg_i64(ret, a->limit);             /* ARGV[3] */
    arg_u64(ret, a->reset_ms);          /* ARGV[4] */
    /* A calendar window only: other windows' calls are as they always were
     * (in the batched form ARGV[5] is then the list, no number). */
    if (a->cal_end_ms) {
        arg_i64(ret, a->cal_start_ms);  /* ARGV[5] */
        arg_i64(ret, a->cal_end_ms);    /* ARGV[6] */
        arg_i64(ret, a->cal_next_ms);   /* ARGV[7] */
    }
}

#define LUA_BUCKET(mode)                                                             \
    "-- token bucket: KEYS[1] = hash {d = tokens missing, t = last refill (Redis ms)},\n" \
    "-- expiring when the bucket is full again.  ARGV: op, n, limit, refill_amount,\n" \
    "-- refill_ms, strict (1|0) -> {allowed, tokens, ms to the next refill}.\n"      \
    "-- A debit takes always: d may pass cap (tokens below zero, refills pay back),\n" \
    "-- at most " LUA_STR(ALGO_DEBT_WINDOWS) " capacities of debt.\n"                \
    "local key = KEYS[1]\n"                                                          \
    "local cap = tonumber(ARGV[3])\n"                                                \
    "local amount, period = tonumber(ARGV[4]), tonumber(ARGV[5])\n"                  \
    LUA_NOW                                                                          \
    KV(mode, LAYER)                                                                  \
    "local function decide(op, n)\n"                                                 \
    LUA_HMGET(mode, "'d', 't'")                                                      \
    "local d, t = tonumber(st[1]), tonumber(st[2])\n"                                \
    "local tokens, last = cap, now\n"                                                \
    "if d and t and d > 0 then\n"                                                    \
    "  if t > now then t = now end\n"                                                \
    "  if t + math.ceil(d / amount) * period > now then\n"                           \
    "    local refills = math.floor((now - t) / period)\n"                           \
    "    d = d - refills * amount\n"                                                 \
    "    if d < 0 then d = 0 end\n"                                                  \
    "    last = t + refills * period\n"                                              \
    "    tokens = cap - d\n"                                                         \
    "  end\n"                                                                        \
    "end\n"                                                                          \
    "local fits = n <= tokens\n"                                                     \
    "local debit = op == 'debit'\n"                                                  \
    "if op == 'take' or debit then\n"                                                \
    "  if fits or debit then\n"                                                      \
    "    tokens = tokens - n\n"                                                      \
    "    local most = math.floor(549755813888 / period) * amount\n"                  \
    "    if most < cap then most = cap end\n"                                        \
    "    if most > (" LUA_STR(ALGO_DEBT_WINDOWS) " + 1) * cap then\n"                \
    "      most = (" LUA_STR(ALGO_DEBT_WINDOWS) " + 1) * cap\n"                      \
    "    end\n"                                                                      \
    "    if cap - tokens > most then tokens = cap - most end\n"                      \
    "  elseif ARGV[6] == '1' and tokens < cap then\n"                                \
    "    last = now\n"                                                               \
    "  end\n"                                                                        \
    "  if tokens < cap then\n"                                                       \
    "    local missing = cap - tokens\n"                                             \
    "    " KV(mode, HSET) "'d', missing, 't', last)\n"                              \
    "    " KV(mode, PEXPIRE) "last + math.ceil(missing / amount) * period - now)\n" \
    "  end\n"                                                                        \
    "end\n"                                                                          \
    "local reset = 0\n"                                                              \
    "if tokens < cap then reset = last + period - now end\n"                         \
    "if debit then fits = tokens >= 0 end\n"                                         \
    "if fits then return {1, tokens, reset} end\n"                                   \
    "if tokens < 0 then tokens = 0 end\n"                                            \
    "return {0, tokens, reset}\n"                                                    \
    "end\n"

static const char lua_bucket[] = LUA_BUCKET(ONE) LUA_ONE;
static const char lua_bucket_many[] = LUA_BUCKET(MANY) LUA_MANY;

void store_script_bucket(const struct store_bucket_args *a, struct store_call *ret)
{
    call_init(ret, STORE_SCRIPT_BUCKET);
    arg_str(ret, op_arg(a->op));        /* ARGV[1] */
    arg_u64(ret, a->n);                 /* ARGV[2] */
    arg_i64(ret, a->limit);             /* ARGV[3] */
    arg_u64(ret, a->refill_amount);     /* ARGV[4] */
    arg_u64(ret, a->refill_ms);         /* ARGV[5] */
    arg_str(ret, a->strict ? "1" : "0");        /* ARGV[6] */
}

void store_script_gcra(const struct store_bucket_args *a, struct store_call *ret)
{
    call_init(ret, STORE_SCRIPT_GCRA);
    arg_str(ret, op_arg(a->op));        /* ARGV[1] */
    arg_u64(ret, a->n);                 /* ARGV[2] */
    arg_i64(ret, a->limit);             /* ARGV[3] */
    arg_u64(ret, a->refill_amount);     /* ARGV[4] */
    arg_u64(ret, a->refill_ms);         /* ARGV[5] */
    arg_str(ret, a->gcra ? "g" : "c");  /* ARGV[6] */
}

#define LUA_SLIDING(mode)                                                            \
    "-- sliding window (two-window estimate): KEYS[1] = hash {p = previous window's\n" \
    "-- count, c = current count, s = current window start (Redis ms)}, expiring at\n" \
    "-- s + 2w.  ARGV: op, n, limit, window_ms -> {allowed, credit, ms to window end}.\n" \
    "-- A debit counts past the limit, with at most " LUA_STR(ALGO_DEBT_WINDOWS)     \
    " limits of debt and\n-- at most 2^24 - 1, as divvyd's table.\n"                 \
    "local key = KEYS[1]\n"                                                          \
    "local limit, w = tonumber(ARGV[3]), tonumber(ARGV[4])\n"                        \
    LUA_NOW                                                                          \
    KV(mode, LAYER)                                                                  \
    "local function decide(op, n)\n"                                                 \
    LUA_HMGET(mode, "'p', 'c', 's'")                                                 \
    "local prev, count, start, elapsed, fresh = 0, 0, now, 0, true\n"                \
    "local s = tonumber(st[3])\n"                                                    \
    "if s and s + 2 * w > now then\n"                                                \
    "  fresh = false\n"                                                              \
    "  prev, count, start = tonumber(st[1]) or 0, tonumber(st[2]) or 0, s\n"         \
    "  elapsed = now - start\n"                                                      \
    "  if elapsed < 0 then elapsed = 0 end\n"                                        \
    "  if elapsed >= w then\n"                                                       \
    "    prev, count, start, elapsed = count, 0, start + w, elapsed - w\n"           \
    "  end\n"                                                                        \
    "end\n"                                                                          \
    "local budget, spent = limit * w, prev * (w - elapsed) + count * w\n"            \
    "local credit = 0\n"                                                             \
    "if budget > spent then credit = math.floor((budget - spent) / w) end\n"         \
    "local fits = n <= credit\n"                                                     \
    "local debit = op == 'debit'\n"                                                  \
    "if (op == 'take' and fits) or debit then\n"                                     \
    "  count, fresh = math.min(count + n, 16777215, " LUA_DEBT_MOST "), false\n"     \
    "  if fits then credit = credit - n else credit = 0 end\n"                       \
    "  " KV(mode, HSET) "'p', prev, 'c', count, 's', start)\n"                      \
    "  " KV(mode, PEXPIRE) "start + 2 * w - now)\n"                                 \
    "end\n"                                                                          \
    "local reset = 0\n"                                                              \
    "if not fresh then reset = start + w - now end\n"                                \
    "if fits then return {1, credit, reset} end\n"                                   \
    "return {0, credit, reset}\n"                                                    \
    "end\n"

static const char lua_sliding[] = LUA_SLIDING(ONE) LUA_ONE;
static const char lua_sliding_many[] = LUA_SLIDING(MANY) LUA_MANY;

void store_script_sliding(const struct store_sliding_args *a, struct store_call *ret)
{
    call_init(ret, STORE_SCRIPT_SLIDING);
    arg_str(ret, op_arg(a->op));        /* ARGV[1] */
    arg_u64(ret, a->n);                 /* ARGV[2] */
    arg_i64(ret, a->limit);             /* ARGV[3] */
    arg_u64(ret, a->window_ms);         /* ARGV[4] */
}

static const char lua_lease[] =
    "-- lease: KEYS[1] as the window script's (credit used, PTTL = the window).\n"
    "-- ARGV: want, limit, reset_ms, divisor.  Grants min(want, remainder,\n"
    "-- max(1, floor(remainder / divisor))) and counts it as used; nothing while\n"
    "-- the window is in debt (a debit's).\n"
    "-- -> {granted, remainder after, ms to the window's end, 1 if it began now}\n"
    "local key = KEYS[1]\n"
    "local want, limit = tonumber(ARGV[1]), tonumber(ARGV[2])\n"
    "local reset, div = tonumber(ARGV[3]), tonumber(ARGV[4])\n"
    "local got = redis.pcall('GET', key)\n"
    "if type(got) == 'table' and got.err then redis.call('DEL', key); got = false end\n"
    LUA_WINDOW_GET
    "local created = 0\n"
    "local ttl, left, carried = reset, reset, false\n"
    "if used then\n"
    "  ttl = redis.call('PTTL', key)\n"
    "  if ttl < 0 then\n"
    "    redis.call('PEXPIRE', key, reset)\n"
    "    ttl = reset\n"
    "  end\n"
    LUA_WINDOW_CARRY
    "else\n"
    "  used, created = 0, 1\n"
    "end\n"
    "if used > limit then used = limit end\n"
    "local remain = limit - used\n"
    "local k = math.floor(remain / div)\n"
    "if k < 1 then k = 1 end\n"
    "local g = math.min(want, remain, k)\n"
    "if g < 0 then g = 0 end\n"
    "if created == 1 then\n"
    "  if g == 0 then return {0, remain, 0, 0} end\n"
    "  redis.call('SET', key, g, 'PX', reset)\n"
    "elseif g > 0 and carried then\n"
    "  redis.call('SET', key, used + g, 'PX', left)\n"
    "elseif g > 0 then\n"
    "  redis.call('INCRBY', key, g)\n"
    "end\n"
    "return {g, remain - g, left, created}\n";

void store_script_lease(const struct store_lease_args *a, struct store_call *ret)
{
    call_init(ret, STORE_SCRIPT_LEASE);
    arg_u64(ret, a->want);              /* ARGV[1] */
    arg_i64(ret, a->limit);             /* ARGV[2] */
    arg_u64(ret, a->reset_ms);          /* ARGV[3] */
    arg_u64(ret, a->divisor);           /* ARGV[4] */
}

/* An integer as Redis reads one back: never "1e+15". */
#define LUA_INT(x) "string.format('%.0f', " x ")"

static const char lua_adhoc_tb[] =
    "-- ad-hoc token bucket (Smyte's, RESP's RL.*): KEYS[1] = hash {a = tokens,\n"
    "-- t = last refill, Unix ms}, expiring once the bucket is full again.\n"
    "-- ARGV: max, refill, refill_ms, take (0: look), strict (1|0), at (Unix ms; -1:\n"
    "-- Redis's TIME) -> the tokens before the call, after its refills.\n"
    "local key = KEYS[1]\n"
    "local max, refill, period = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])\n"
    "local take, at = tonumber(ARGV[4]), tonumber(ARGV[6])\n"
    LUA_NOW
    "local t = now\n"
    "if at >= 0 then t = at end\n"
    LUA_HMGET(ONE, "'a', 't'")
    "local amount, last = tonumber(st[1]), tonumber(st[2])\n"
    "local exists = amount ~= nil and last ~= nil\n"
    "local before\n"
    "if not exists then\n"
    "  before, last = max, t\n"
    "else\n"
    "  local span = t - last\n"
    "  if span < 0 then span = 0 end\n"
    "  local refills = math.floor(span / period)\n"
    "  last = last + refills * period\n"
    "  local left = max - amount\n"
    "  if left <= 0 or refills >= math.ceil(left / refill) then before, last = max, t\n"
    "  else before = amount + refills * refill end\n"
    "end\n"
    "if take > 0 then\n"
    "  amount = before\n"
    "  if before >= take then amount = before - take end\n"
    "  if ARGV[5] == '1' and amount == 0 then last = t end\n"
    "  if amount < max then\n"
    "    -- full again at idle on the call's clock; an AT in the past lives as long\n"
    "    -- from now (adhoc_expire_ms()); at most 2^40 ms\n"
    "    local idle = last + math.ceil((max - amount) / refill) * period\n"
    "    local base = t\n"
    "    if now < t then base = now end\n"
    "    local ttl = idle - base\n"
    "    if ttl < 1 then ttl = 1 end\n"
    "    if ttl > 1099511627776 then ttl = 1099511627776 end\n"
    "    redis.call('HSET', key, 'a', " LUA_INT("amount") ", 't', " LUA_INT("last") ")\n"
    "    redis.call('PEXPIRE', key, " LUA_INT("ttl") ")\n"
    "  elseif exists then\n"
    "    redis.call('DEL', key)\n"
    "  end\n"
    "end\n"
    "return before\n";

void store_script_adhoc_tb(const struct store_adhoc_tb_args *a, struct store_call *ret)
{
    call_init(ret, STORE_SCRIPT_ADHOC_TB);
    arg_i64(ret, a->max);               /* ARGV[1] */
    arg_i64(ret, a->refill);            /* ARGV[2] */
    arg_i64(ret, a->refill_ms);         /* ARGV[3] */
    arg_i64(ret, a->take);              /* ARGV[4] */
    arg_str(ret, a->strict ? "1" : "0");        /* ARGV[5] */
    arg_i64(ret, a->at_ms < 0 ? -1 : a->at_ms); /* ARGV[6] */
}

static const char lua_adhoc_gcra[] =
    "-- ad-hoc GCRA (redis-cell's CL.THROTTLE): KEYS[1] = hash {s = the theoretical\n"
    "-- arrival time's Unix seconds, n = its nanoseconds}, expiring at it.\n"
    "-- ARGV: max_burst, count, period_s, quantity (0: look)\n"
    "-- -> {limited, limit, remaining, retry_after_ns, reset_after_ns}.\n"
    "-- Times count from Redis's TIME, so doubles keep their nanoseconds.\n"
    "local key = KEYS[1]\n"
    "local burst, count = tonumber(ARGV[1]), tonumber(ARGV[2])\n"
    "local period, q = tonumber(ARGV[3]), tonumber(ARGV[4])\n"
    "if redis.replicate_commands then redis.replicate_commands() end\n"
    "local tm = redis.call('TIME')\n"
    "local now_s, now_n = tonumber(tm[1]), tonumber(tm[2]) * 1000\n"
    LUA_HMGET(ONE, "'s', 'n'")
    "local tat = 0\n"
    "local s, n = tonumber(st[1]), tonumber(st[2])\n"
    "if s and n then tat = (s - now_s) * 1000000000 + (n - now_n) end\n"
    "local function trunc(x) if x < 0 then return math.ceil(x) end return math.floor(x) end\n"
    "local t = math.floor(period * 1000000000 / count)\n"
    "local dvt, inc = t * (burst + 1), t * q\n"
    "local limited, retry, ttl = 0, -1000000000, 0\n"
    "local new_tat = math.max(0, tat) + inc\n"
    "if new_tat - dvt > 0 then\n"
    "  if inc <= dvt then retry = new_tat - dvt end\n"
    "  limited, ttl = 1, tat\n"
    "else\n"
    "  ttl, tat = new_tat, new_tat\n"
    "end\n"
    "local remaining, nxt = 0, dvt - ttl\n"
    "if nxt > -t then\n"
    "  local per = math.floor(t / 1000)\n"
    "  if per == 0 then per = 1 end\n"
    "  remaining = trunc(trunc(nxt / 1000) / per)\n"
    "end\n"
    "if limited == 0 and inc > 0 then\n"
    "  local total = now_n + tat\n"
    "  local sec = math.floor(total / 1000000000)\n"
    "  redis.call('HSET', key, 's', " LUA_INT("now_s + sec") ", 'n', "
    LUA_INT("total - sec * 1000000000") ")\n"
    "  redis.call('PEXPIRE', key, " LUA_INT("math.ceil(tat / 1000000)") ")\n"
    "end\n"
    "return {limited, burst + 1, remaining, retry, ttl}\n";

void store_script_adhoc_gcra(const struct store_adhoc_gcra_args *a, struct store_call *ret)
{
    call_init(ret, STORE_SCRIPT_ADHOC_GCRA);
    arg_i64(ret, a->max_burst);         /* ARGV[1] */
    arg_i64(ret, a->count);             /* ARGV[2] */
    arg_i64(ret, a->period_s);          /* ARGV[3] */
    arg_i64(ret, a->quantity);          /* ARGV[4] */
}

/* ---- batched calls ------------------------------------------------------------ */

int store_items_add(struct store_items *it, enum store_op op, uint64_t n)
{
    int len;

    if (it->n >= STORE_ITEMS_MAX)
        return -ENOBUFS;
    /* "t3 p1 d2": LUA_MANY's pattern, (%a)(%d+). */
    len = snprintf(it->text + it->len, sizeof(it->text) - it->len, "%s%c%" PRIu64,
                   it->n ? " " : "", op == STORE_PEEK ? 'p' : op == STORE_DEBIT ? 'd' : 't', n);
    if (len < 0 || (size_t)len >= sizeof(it->text) - it->len)
        return -ENOBUFS;
    it->len += (size_t)len;
    it->n++;
    return 0;
}

void store_verdict_args_of(enum rules_algo algo, int64_t limit, const struct table_limits *lim,
                           bool strict, enum store_op op, uint64_t n,
                           struct store_verdict_args *ret)
{
    switch (algo) {
    case RULES_ALGO_GCRA:
    case RULES_ALGO_TOKEN_BUCKET:
        ret->script = algo == RULES_ALGO_GCRA || lim->continuous ? STORE_SCRIPT_GCRA
                                                                : STORE_SCRIPT_BUCKET;
        ret->bucket = (struct store_bucket_args){ .op = op, .n = n, .limit = limit,
                                                  .refill_amount = lim->refill_amount,
                                                  .refill_ms = lim->refill_ms, .strict = strict,
                                                  .gcra = algo == RULES_ALGO_GCRA };
        return;
    case RULES_ALGO_SLIDING_WINDOW:
        ret->script = STORE_SCRIPT_SLIDING;
        ret->sliding = (struct store_sliding_args){ .op = op, .n = n, .limit = limit,
                                                    .window_ms = lim->reset_ms };
        return;
    case RULES_ALGO_LOCKOUT:
        ret->script = STORE_SCRIPT_LOCKOUT;
        ret->lockout = (struct store_lockout_args){ .op = op, .n = n, .lim = *lim };
        return;
    default:
        ret->script = STORE_SCRIPT_WINDOW;
        ret->window = (struct store_window_args){ .op = op, .n = n, .limit = limit,
                                                  .reset_ms = lim->reset_ms };
        return;
    }
}

void store_script_verdict(const struct store_verdict_args *a, struct store_call *ret)
{
    switch (a->script) {
    case STORE_SCRIPT_BUCKET:
        store_script_bucket(&a->bucket, ret);
        return;
    case STORE_SCRIPT_GCRA:
        store_script_gcra(&a->bucket, ret);
        return;
    case STORE_SCRIPT_SLIDING:
        store_script_sliding(&a->sliding, ret);
        return;
    case STORE_SCRIPT_LOCKOUT:
        store_script_lockout(&a->lockout, ret);
        return;
    default:
        store_script_window(&a->window, ret);
        return;
    }
}

void store_script_verdicts(const struct store_verdict_args *a, const struct store_items *items,
                           struct store_call *ret)
{
    /* The plain call's ARGV with 'many' and the count for op and n, so each
     * argument of the algorithm stays where decide() reads it. */
    store_script_verdict(a, ret);
    ret->script = ret->script == STORE_SCRIPT_BUCKET ? STORE_SCRIPT_BUCKET_MANY :
                  ret->script == STORE_SCRIPT_GCRA ? STORE_SCRIPT_GCRA_MANY :
                  ret->script == STORE_SCRIPT_SLIDING ? STORE_SCRIPT_SLIDING_MANY :
                                                        STORE_SCRIPT_WINDOW_MANY;
    snprintf(ret->argv[0], STORE_SCRIPT_ARG_SIZE, "many");
    snprintf(ret->argv[1], STORE_SCRIPT_ARG_SIZE, "%u", items->n);
    ret->list = items->text;
    ret->list_len = items->len;
}

bool store_script_same(const struct store_verdict_args *a, const struct store_verdict_args *b)
{
    /* A lockout call is never batched (store_script_lock.c). */
    if (a->script != b->script || a->script == STORE_SCRIPT_LOCKOUT)
        return false;
    switch (a->script) {
    case STORE_SCRIPT_BUCKET:
    case STORE_SCRIPT_GCRA:
        return a->bucket.limit == b->bucket.limit &&
               a->bucket.refill_amount == b->bucket.refill_amount &&
               a->bucket.refill_ms == b->bucket.refill_ms && a->bucket.strict == b->bucket.strict &&
               a->bucket.gcra == b->bucket.gcra;
    case STORE_SCRIPT_SLIDING:
        return a->sliding.limit == b->sliding.limit &&
               a->sliding.window_ms == b->sliding.window_ms;
    default:
        return a->window.limit == b->window.limit && a->window.reset_ms == b->window.reset_ms &&
               a->window.cal_start_ms == b->window.cal_start_ms &&
               a->window.cal_end_ms == b->window.cal_end_ms;
    }
}

static const char *const scripts[STORE_N_SCRIPTS] = {
    lua_window, lua_bucket, lua_sliding, lua_lease, lua_adhoc_tb, lua_adhoc_gcra,
    lua_window_many, lua_bucket_many, lua_sliding_many,
    store_script_lua_gcra, store_script_lua_gcra_many, store_lua_lockout,
};
static const char *const script_names[STORE_N_SCRIPTS] = {
    "window", "token_bucket", "sliding_window", "lease", "adhoc_tb", "adhoc_gcra",
    "window_many", "token_bucket_many", "sliding_window_many",
    "gcra", "gcra_many", "lockout",
};
static char script_sha[STORE_N_SCRIPTS][41];
static pthread_once_t sha_once = PTHREAD_ONCE_INIT;

/* ---- SHA-1 (FIPS 180-4), for EVALSHA names ------------------------------------ */

static uint32_t rol32(uint32_t v, unsigned n)
{
    return v << n | v >> (32 - n);
}

static void sha1_block(uint32_t h[5], const uint8_t *p)
{
    uint32_t w[80], a, b, c, d, e, f, k, t;

    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
               (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 80; i++)
        w[i] = rol32(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
    a = h[0];
    b = h[1];
    c = h[2];
    d = h[3];
    e = h[4];
    for (int i = 0; i < 80; i++) {
        if (i < 20) {
            f = (b & c) | (~b & d);
            k = 0x5a827999;
        } else if (i < 40) {
            f = b ^ c ^ d;
            k = 0x6ed9eba1;
        } else if (i < 60) {
            f = (b & c) | (b & d) | (c & d);
            k = 0x8f1bbcdc;
        } else {
            f = b ^ c ^ d;
            k = 0xca62c1d6;
        }
        t = rol32(a, 5) + f + e + k + w[i];
        e = d;
        d = c;
        c = rol32(b, 30);
        b = a;
        a = t;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
}

void store_sha1_hex(const void *data, size_t len, char ret[41])
{
    uint32_t h[5] = { 0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476, 0xc3d2e1f0 };
    const uint8_t *p = data;
    uint8_t tail[128];
    size_t rest = len % 64, n_tail;
    uint64_t bits = (uint64_t)len * 8;

    for (size_t off = 0; off + 64 <= len; off += 64)
        sha1_block(h, p + off);
    memset(tail, 0, sizeof(tail));
    if (rest)
        memcpy(tail, p + len - rest, rest);
    tail[rest] = 0x80;
    n_tail = rest < 56 ? 64 : 128;
    for (int i = 0; i < 8; i++)
        tail[n_tail - 1 - i] = (uint8_t)(bits >> (8 * i));
    sha1_block(h, tail);
    if (n_tail == 128)
        sha1_block(h, tail + 64);
    for (int i = 0; i < 5; i++)
        snprintf(ret + 8 * i, 9, "%08" PRIx32, h[i]);
}

static void sha_init(void)
{
    for (int i = 0; i < STORE_N_SCRIPTS; i++)
        store_sha1_hex(scripts[i], strlen(scripts[i]), script_sha[i]);
}

const char *store_script_source(enum store_script script)
{
    return (unsigned)script < STORE_N_SCRIPTS ? scripts[script] : NULL;
}

const char *store_script_sha(enum store_script script)
{
    pthread_once(&sha_once, sha_init);
    return (unsigned)script < STORE_N_SCRIPTS ? script_sha[script] : NULL;
}

const char *store_script_name(enum store_script script)
{
    return (unsigned)script < STORE_N_SCRIPTS ? script_names[script] : "?";
}
