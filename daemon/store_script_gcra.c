/* SPDX-License-Identifier: MIT */
/*
 * store_script_gcra: the strict script of the continuously refilling
 * algorithms, algorithm = "gcra" and a token_bucket with refill =
 * "continuous" (common/algo_gcra.c, docs/redis.md "Scripts"): the same
 * arithmetic as divvyd's table, on Redis's clock.  Its ARGV is packed by
 * store_script_gcra() in store_script.c, its reply is a verdict's.
 */
#include "algo.h"
#include "store_script_lua.h"

/* KEYS[1] is a string "<kind>:<full>:<r>:<debt>": kind g (gcra) or c (a
 * continuous bucket), the bucket full again at full - r / refill_amount
 * (Redis ms), debt 1 when a DEBIT took it past empty; PX expires it when
 * full.  Anything else (another algorithm's key, another kind) is a full
 * bucket, overwritten by the first take.  Time counts in units of
 * 1 / refill_amount ms, so one credit costs exactly refill_ms units; every
 * number stays below 2^53 (rules_validate(): credit_limit * refill_ms at
 * most 2^49, ALGO_DEBT_WINDOWS + 1 buckets with a debt). */
#define LUA_GCRA(mode)                                                               \
    "-- gcra / continuous token bucket: KEYS[1] = 'kind:full ms:r:debt' (see\n"      \
    "-- store_script_gcra.c).  ARGV: op, n, limit, refill_amount, refill_ms,\n"      \
    "-- kind (g|c) -> {allowed, credit, ms until full (g) or the next credit (c)}\n"  \
    "local key = KEYS[1]\n"                                                          \
    "local cap, amount = tonumber(ARGV[3]), tonumber(ARGV[4])\n"                     \
    "local period, kind = tonumber(ARGV[5]), ARGV[6]\n"                              \
    "local dvt = cap * period\n"                                                     \
    LUA_NOW                                                                          \
    KV(mode, LAYER)                                                                  \
    "local function decide(op, n)\n"                                                 \
    "local got = " KV(mode, GET) ")\n"                                               \
    "if type(got) == 'table' and got.err then " KV(mode, DEL) "); got = false end\n" \
    "local d = 0\n"                                                                  \
    "if got then\n"                                                                  \
    "  local k, t, r, debt = string.match(got, '^(%a):(%d+):(%d+):(%d)$')\n"         \
    "  if k == kind then\n"                                                          \
    "    t, r = tonumber(t), tonumber(r)\n"                                          \
    "    if r >= amount then r = amount - 1 end\n"                                   \
    "    if t > now then d = (t - now) * amount - r end\n"                           \
    "    if d > dvt and debt ~= '1' then d = dvt end\n"                              \
    "  end\n"                                                                        \
    "end\n"                                                                          \
    "local allowed\n"                                                                \
    "if op == 'debit' then\n"                                                        \
    "  local most = (" LUA_STR(ALGO_DEBT_WINDOWS) " + 1) * cap\n"                    \
    "  if n > most then n = most end\n"                                              \
    "  d = d + n * period\n"                                                         \
    "  if d > most * period then d = most * period end\n"                            \
    "  allowed = d <= dvt\n"                                                         \
    "else\n"                                                                         \
    "  allowed = n <= cap and d + n * period <= dvt\n"                               \
    "  if allowed and op == 'take' then d = d + n * period end\n"                    \
    "end\n"                                                                          \
    "if (op == 'debit' or (op == 'take' and allowed)) and d > 0 then\n"              \
    "  local ms = math.ceil(d / amount)\n"                                           \
    "  local debt = 0\n"                                                             \
    "  if d > dvt then debt = 1 end\n"                                               \
    "  " KV(mode, SET) "string.format('%s:%.0f:%.0f:%d', kind, now + ms, ms * amount - d,"\
    " debt), 'PX', ms)\n"                                                            \
    "end\n"                                                                          \
    "local credit, reset = 0, 0\n"                                                   \
    "if d < dvt then credit = math.floor((dvt - d) / period) end\n"                  \
    "if d > 0 and kind == 'g' then reset = math.ceil(d / amount) end\n"              \
    "if d > 0 and kind ~= 'g' then\n"                                                \
    "  local part = d % period\n"                                                    \
    "  if part == 0 then part = period end\n"                                        \
    "  reset = math.ceil(part / amount)\n"                                           \
    "end\n"                                                                          \
    "if allowed then return {1, credit, reset} end\n"                                \
    "return {0, credit, reset}\n"                                                    \
    "end\n"

const char store_script_lua_gcra[] = LUA_GCRA(ONE) LUA_ONE;
const char store_script_lua_gcra_many[] = LUA_GCRA(MANY) LUA_MANY;
