/* SPDX-License-Identifier: MIT */
/*
 * store_script_lock: the lockout algorithm (common/algo_lock.c, docs/rules.md "Lockout") as a
 * strict Redis script, so failures, locks and escalation levels are shared by every divvyd on
 * one Redis (docs/redis.md "Login rules").  The same state machine as the host table's, on a
 * hash instead of a packed word, with Redis's TIME as the clock.  Never batched
 * (store_script_same() keeps each call apart): a login makes a few calls, not a hot key.
 */
#include <inttypes.h>
#include <stdio.h>

#include "algo_lock.h"
#include "store_script.h"

#define LOCK_STR_(x) #x
#define LOCK_STR(x) LOCK_STR_(x)

const char store_lua_lockout[] =
    "-- lockout: KEYS[1] = hash {c = failures in the interval, e = the phase's end (Redis ms:\n"
    "-- the lock's, or the counting interval's), l = the last failure, v = level (locks\n"
    "-- remembered), k = 1 while locked}, expiring at e, plus remember while v > 0.\n"
    "-- ARGV: op (take|peek|debit), n, limit, fail_ms, unlock_ms, lock_factor, lock_max_ms,\n"
    "-- remember_ms, delay_after, delay_ms, delay_factor, delay_max_ms\n"
    "-- -> {allowed, credit, ms}: refused with credit 0 while locked (ms: to its end),\n"
    "-- refused with credit > 0 while a delay runs (ms: to its end).\n"
    "local key = KEYS[1]\n"
    "local op, n, limit = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])\n"
    "local fail, unlock = tonumber(ARGV[4]), tonumber(ARGV[5])\n"
    "local factor, lmax, remember = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])\n"
    "local after, delay = tonumber(ARGV[9]), tonumber(ARGV[10])\n"
    "local dfactor, dmax = tonumber(ARGV[11]), tonumber(ARGV[12])\n"
    "if redis.replicate_commands then redis.replicate_commands() end\n"
    "local tm = redis.call('TIME')\n"
    "local now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)\n"
    "local st = redis.pcall('HMGET', key, 'c', 'e', 'l', 'v', 'k')\n"
    "if st.err then redis.call('DEL', key); st = {} end\n"
    "local c, e = tonumber(st[1]) or 0, tonumber(st[2]) or 0\n"
    "local l, v, k = tonumber(st[3]) or 0, tonumber(st[4]) or 0, st[5] == '1'\n"
    "if k and e > now then return {0, 0, e - now} end\n"
    "if k or e <= now then c = 0 end\n"
    "local function ramp(base, f, steps, most)\n"
    "  local x = base\n"
    "  for i = 1, steps do\n"
    "    if x >= most or f <= 1 then break end\n"
    "    x = x * f\n"
    "  end\n"
    "  if x > most then x = most end\n"
    "  return x\n"
    "end\n"
    "local left = 0\n"
    "if c > 0 then left = e - now end\n"
    "if op == 'peek' or n == 0 then\n"
    "  if c > 0 and after > 0 and c >= after then\n"
    "    local w = l + ramp(delay, dfactor, c - after, dmax)\n"
    "    if now < w then return {0, limit - c, w - now} end\n"
    "  end\n"
    "  if n <= limit - c then return {1, limit - c, left} end\n"
    "  return {0, limit - c, left}\n"
    "end\n"
    "if n > limit - c then return {0, limit - c, left} end\n"
    "if c == 0 then e = now + fail end\n"
    "c, l = c + n, now\n"
    "if c >= limit then\n"
    "  local len = ramp(unlock, factor, v, lmax)\n"
    "  e = now + len\n"
    "  if v < " LOCK_STR(ALGO_LOCK_LEVEL_MAX) " then v = v + 1 end\n"
    "  redis.call('HSET', key, 'c', 0, 'e', e, 'l', l, 'v', v, 'k', 1)\n"
    "  redis.call('PEXPIRE', key, len + remember)\n"
    "  return {1, 0, len}\n"
    "end\n"
    "redis.call('HSET', key, 'c', c, 'e', e, 'l', l, 'v', v, 'k', 0)\n"
    "local ttl = e - now\n"
    "if v > 0 then ttl = ttl + remember end\n"
    "redis.call('PEXPIRE', key, ttl)\n"
    "return {1, limit - c, e - now}\n";

static void lock_arg(struct store_call *c, uint64_t v)
{
    if (c->argc < STORE_SCRIPT_ARGV_MAX)
        snprintf(c->argv[c->argc++], STORE_SCRIPT_ARG_SIZE, "%" PRIu64, v);
}

void store_script_lockout(const struct store_lockout_args *a, struct store_call *ret)
{
    const struct table_limits *lim = &a->lim;

    ret->script = STORE_SCRIPT_LOCKOUT;
    ret->argc = 0;
    ret->list = NULL;
    ret->list_len = 0;
    snprintf(ret->argv[ret->argc++], STORE_SCRIPT_ARG_SIZE, "%s",
             a->op == STORE_PEEK ? "peek" : a->op == STORE_DEBIT ? "debit" : "take");
    lock_arg(ret, a->n);                        /* ARGV[2] */
    lock_arg(ret, lim->credit_limit);           /* ARGV[3] */
    lock_arg(ret, lim->reset_ms);               /* ARGV[4]: fail_interval */
    lock_arg(ret, lim->unlock_ms);
    lock_arg(ret, lim->lock_factor);
    lock_arg(ret, lim->lock_max_ms);
    lock_arg(ret, lim->remember_ms);            /* ARGV[8] */
    lock_arg(ret, lim->delay_after);
    lock_arg(ret, lim->delay_ms);
    lock_arg(ret, lim->delay_factor);
    lock_arg(ret, lim->delay_max_ms);           /* ARGV[12] */
}
