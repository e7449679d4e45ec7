/* SPDX-License-Identifier: MIT */
/*
 * store_script_lua: the Lua pieces every verdict script is made of
 * (store_script.c, store_script_gcra.c): Redis's clock, the key accesses
 * written once for the plain and the batched form, and those two forms'
 * entry points.  Text macros only; private to the store_script_*.c files.
 */
#ifndef DIVVY_STORE_SCRIPT_LUA_H
#define DIVVY_STORE_SCRIPT_LUA_H

/* Time for algorithms that need it comes from Redis (TIME), never from a
 * host; redis.replicate_commands() lets a script write after TIME on Redis
 * older than 5 (later versions always replicate effects). */
#define LUA_NOW                                                                      \
    "if redis.replicate_commands then redis.replicate_commands() end\n"              \
    "local tm = redis.call('TIME')\n"                                                \
    "local now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)\n"

/* A C constant as Lua text. */
#define LUA_STR_(x) #x
#define LUA_STR(x) LUA_STR_(x)

/* Each verdict script is one function, decide(op, n), called once by the
 * plain script (ARGV[1] the op, ARGV[2] n) and once per request, in arrival
 * order, by its batched form (LUA_MANY): the same code, so a batch answers
 * each request as the plain calls one after the other would.  decide()'s
 * text is written once (LUA_WINDOW(mode), ...) and made twice: its key
 * accesses, KV(mode, OP) followed by their arguments and ")", are one
 * Redis command each in the plain script (mode ONE), and calls of the Lua
 * copy of the key in the batched form (mode MANY, LUA_KV_MANY), which reads
 * the key once, keeps what decide() writes and writes the result once at
 * the end: a batch costs Redis about one request's key accesses. */
#define KV(mode, op)        KV_##op##_##mode
#define KV_LAYER_ONE        ""
#define KV_LAYER_MANY       LUA_KV_MANY
#define KV_GET_ONE          "redis.pcall('GET', key"
#define KV_GET_MANY         "kv.get("
#define KV_DEL_ONE          "redis.call('DEL', key"
#define KV_DEL_MANY         "kv.del("
#define KV_SET_ONE          "redis.call('SET', key, "
#define KV_SET_MANY         "kv.set("
#define KV_PTTL_ONE         "redis.call('PTTL', key"
#define KV_PTTL_MANY        "kv.pttl("
#define KV_PEXPIRE_ONE      "redis.call('PEXPIRE', key, "
#define KV_PEXPIRE_MANY     "kv.pexpire("
#define KV_INCRBY_ONE       "redis.call('INCRBY', key, "
#define KV_INCRBY_MANY      "kv.incrby("
#define KV_HMGET_ONE        "redis.pcall('HMGET', key, "
#define KV_HMGET_MANY       "kv.hmget("
#define KV_HSET_ONE         "redis.call('HSET', key, "
#define KV_HSET_MANY        "kv.hset("

/* The same accesses on a copy of the key held in Lua (the script runs
 * alone, so nobody else sees the key meanwhile): val is the string's value
 * (false: none; nil: not read yet), h the hash's fields (read: hread), ttl
 * its PTTL (Redis time stands still for a script), dirty whether it must be
 * written back; kv.flush() writes it with the same commands, the numbers
 * converted by Redis as the plain script's are.  A key of another type is
 * deleted at once, as the plain script does. */
#define LUA_KV_MANY                                                                  \
    "local kv, c = {}, {h = {}}\n"                                                   \
    "function kv.get()\n"                                                            \
    "  if c.val == nil then\n"                                                       \
    "    local got = redis.pcall('GET', key)\n"                                      \
    "    if type(got) == 'table' then return got end\n"                              \
    "    c.val = got\n"                                                              \
    "  end\n"                                                                        \
    "  return c.val\n"                                                               \
    "end\n"                                                                          \
    "function kv.del()\n"                                                            \
    "  redis.call('DEL', key)\n"                                                     \
    "  c.val, c.ttl, c.h, c.hread, c.dirty = false, nil, {}, true, false\n"          \
    "end\n"                                                                          \
    "function kv.set(v, px_, px) c.val, c.ttl, c.dirty = v, px, true end\n"         \
    "function kv.pttl()\n"                                                           \
    "  if c.ttl == nil then c.ttl = redis.call('PTTL', key) end\n"                   \
    "  return c.ttl\n"                                                               \
    "end\n"                                                                          \
    "function kv.pexpire(ms) c.ttl, c.dirty = ms, true end\n"                        \
    "function kv.incrby(n)\n"                                                        \
    "  kv.pttl()\n"                                                                  \
    "  c.val, c.dirty = tonumber(c.val) + n, true\n"                                 \
    "end\n"                                                                          \
    "function kv.hmget(...)\n"                                                       \
    "  local f, out = {...}, {}\n"                                                   \
    "  if not c.hread then\n"                                                        \
    "    local st = redis.pcall('HMGET', key, ...)\n"                                \
    "    if st.err then return st end\n"                                             \
    "    for i = 1, #f do c.h[f[i]] = st[i] end\n"                                   \
    "    c.hread = true\n"                                                           \
    "  end\n"                                                                        \
    "  for i = 1, #f do out[i] = c.h[f[i]] or false end\n"                           \
    "  return out\n"                                                                 \
    "end\n"                                                                          \
    "function kv.hset(...)\n"                                                        \
    "  local a = {...}\n"                                                            \
    "  for i = 1, #a, 2 do c.h[a[i]] = a[i + 1] end\n"                               \
    "  c.dirty = true\n"                                                             \
    "end\n"                                                                          \
    "function kv.flush()\n"                                                          \
    "  if not c.dirty then return end\n"                                             \
    "  if c.val then\n"                                                              \
    "    redis.call('SET', key, c.val, 'PX', c.ttl)\n"                               \
    "    return\n"                                                                   \
    "  end\n"                                                                        \
    "  local a = {}\n"                                                               \
    "  for f, v in pairs(c.h) do\n"                                                  \
    "    if v then a[#a + 1] = f; a[#a + 1] = v end\n"                               \
    "  end\n"                                                                        \
    "  if #a > 0 then redis.call('HSET', key, unpack(a)) end\n"                      \
    "  if c.ttl then redis.call('PEXPIRE', key, c.ttl) end\n"                        \
    "end\n"
#define LUA_ONE "return decide(ARGV[1], tonumber(ARGV[2]))\n"

/* The batched form: ARGV[1] = 'many', ARGV[2] = how many, the algorithm's
 * own arguments in their places, and last the requests ("t3 p1 d2": op
 * letter and n each).  -> {count, allowed, credit, ms, allowed, ...}. */
#define LUA_MANY                                                                     \
    "local ops = {t = 'take', p = 'peek', d = 'debit'}\n"                            \
    "local out = {0}\n"                                                              \
    "for o, k in string.gmatch(ARGV[#ARGV], '(%a)(%d+)') do\n"                        \
    "  local v = decide(ops[o], tonumber(k))\n"                                       \
    "  for i = 1, 3 do out[#out + 1] = v[i] end\n"                                   \
    "  out[1] = out[1] + 1\n"                                                        \
    "end\n"                                                                          \
    "kv.flush()\n"                                                                   \
    "return out\n"

/* The texts of store_script_gcra.c: the continuous algorithms' script, plain
 * and batched. */
extern const char store_script_lua_gcra[];
extern const char store_script_lua_gcra_many[];

#endif
