/* SPDX-License-Identifier: MIT */
/*
 * dlog_query: times, the rules a decision log describes, and `divvyctl
 * log`'s filters (server/dlog_query.h, docs/decision-log.md).  Owns the
 * copies of the rules it keeps; does no I/O.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "dlog_query.h"

/* ---- times ------------------------------------------------------------------------------ */

/* Days from 1970-01-01 to @y-@m-@d (proleptic Gregorian; H. Hinnant's). */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
    int64_t era;
    unsigned yoe, doy, doe;

    y -= m <= 2;
    era = (y >= 0 ? y : y - 399) / 400;
    yoe = (unsigned)(y - era * 400);
    doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

static void civil_from_days(int64_t z, int64_t *y, unsigned *m, unsigned *d)
{
    int64_t era;
    unsigned doe, yoe, doy, mp;

    z += 719468;
    era = (z >= 0 ? z : z - 146096) / 146097;
    doe = (unsigned)(z - era * 146097);
    yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    mp = (5 * doy + 2) / 153;
    *d = doy - (153 * mp + 2) / 5 + 1;
    *m = mp < 10 ? mp + 3 : mp - 9;
    *y = (int64_t)yoe + era * 400 + (*m <= 2);
}

static bool leap(int64_t y)
{
    return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

/* Exactly @n digits at *@p into *@ret; moves *@p past them. */
static bool digits(const char **p, unsigned n, unsigned *ret)
{
    unsigned v = 0;

    for (unsigned i = 0; i < n; i++) {
        if (!isdigit((unsigned char)(*p)[i]))
            return false;
        v = v * 10 + (unsigned)((*p)[i] - '0');
    }
    *p += n;
    *ret = v;
    return true;
}

/* "-30s", "-15m", "-2h", "-7d" before @now_ms. */
static int parse_relative(const char *text, uint64_t now_ms, uint64_t *ret_ms)
{
    uint64_t v = 0, unit;
    const char *p = text + 1;

    if (!isdigit((unsigned char)*p))
        return -EINVAL;
    for (; isdigit((unsigned char)*p); p++) {
        if (v > 1000000000)
            return -EINVAL;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    switch (*p) {
    case 's': unit = 1000; break;
    case 'm': unit = 60 * 1000; break;
    case 'h': unit = 3600 * 1000; break;
    case 'd': unit = 86400 * 1000; break;
    default: return -EINVAL;
    }
    if (p[1] || v * unit > now_ms)
        return -EINVAL;
    *ret_ms = now_ms - v * unit;
    return 0;
}

static int parse_epoch(const char *text, uint64_t *ret_ms)
{
    uint64_t v = 0;
    const char *p = text + 1;

    if (!*p)
        return -EINVAL;
    for (; *p; p++) {
        if (!isdigit((unsigned char)*p) || v > 253402300799ull)    /* 9999-12-31 */
            return -EINVAL;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    if (v > 253402300799ull)
        return -EINVAL;
    *ret_ms = v * 1000;
    return 0;
}

int dlog_query_time(const char *text, uint64_t now_ms, uint64_t *ret_ms)
{
    static const unsigned mdays[] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
    unsigned y, mo, d, h = 0, mi = 0, s = 0, ms = 0, oh, om;
    int64_t days, off_ms = 0, t;
    const char *p = text;

    if (text[0] == '-')
        return parse_relative(text, now_ms, ret_ms);
    if (text[0] == '@')
        return parse_epoch(text, ret_ms);
    if (!digits(&p, 4, &y) || *p++ != '-' || !digits(&p, 2, &mo) || *p++ != '-' ||
        !digits(&p, 2, &d))
        return -EINVAL;
    if (y < 1970 || mo < 1 || mo > 12 || d < 1 ||
        d > mdays[mo - 1] + (mo == 2 && leap(y)))
        return -EINVAL;
    if (*p == 'T' || *p == 't' || *p == ' ') {
        p++;
        if (!digits(&p, 2, &h) || *p++ != ':' || !digits(&p, 2, &mi))
            return -EINVAL;
        if (*p == ':') {
            p++;
            if (!digits(&p, 2, &s))
                return -EINVAL;
            if (*p == '.') {
                unsigned scale = 100;

                if (!isdigit((unsigned char)*++p))
                    return -EINVAL;
                /* Milliseconds; further digits are read and dropped. */
                for (; isdigit((unsigned char)*p); p++, scale /= 10)
                    ms += (unsigned)(*p - '0') * scale;
            }
        }
        if (h > 23 || mi > 59 || s > 60)    /* 60: a leap second, as RFC 3339 allows */
            return -EINVAL;
        if (*p == 'Z' || *p == 'z') {
            p++;
        } else if (*p == '+' || *p == '-') {
            int sign = *p++ == '-' ? -1 : 1;

            if (!digits(&p, 2, &oh) || *p++ != ':' || !digits(&p, 2, &om) || oh > 23 ||
                om > 59)
                return -EINVAL;
            off_ms = sign * (int64_t)(oh * 3600 + om * 60) * 1000;
        }
    }
    if (*p)
        return -EINVAL;
    days = days_from_civil(y, mo, d);
    t = ((days * 86400) + h * 3600 + mi * 60 + s) * 1000 + ms - off_ms;
    if (t < 0)
        return -EINVAL;
    *ret_ms = (uint64_t)t;
    return 0;
}

void dlog_query_fmt_time(uint64_t ms, char *buf)
{
    uint64_t secs = ms / 1000, sod = secs % 86400;
    unsigned m, d;
    int64_t y;

    civil_from_days((int64_t)(secs / 86400), &y, &m, &d);
    snprintf(buf, DLOG_QUERY_TIME_MAX, "%04" PRId64 "-%02u-%02uT%02u:%02u:%02u.%03uZ",
             y % 100000, m, d, (unsigned)(sod / 3600), (unsigned)(sod / 60 % 60),
             (unsigned)(sod % 60), (unsigned)(ms % 1000));
}

/* ---- rules ------------------------------------------------------------------------------ */

/* One kept rule: its description, its strings in one allocation. */
struct qrule {
    struct dlog_rule r;
    char *strs;
    size_t strs_len;
};

struct dlog_query_rules {
    struct qrule **slot;        /* open addressing by id; a power of two */
    size_t cap;
    size_t n;
    size_t bytes;               /* of the kept rules' strings */
};

struct dlog_query_rules *dlog_query_rules_new(void)
{
    struct dlog_query_rules *m = calloc(1, sizeof(*m));

    if (!m)
        return NULL;
    m->cap = 64;
    m->slot = calloc(m->cap, sizeof(*m->slot));
    if (!m->slot) {
        free(m);
        return NULL;
    }
    return m;
}

static void qrule_free(struct qrule *q)
{
    if (q)
        free(q->strs);
    free(q);
}

void dlog_query_rules_free(struct dlog_query_rules *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->cap; i++)
        qrule_free(m->slot[i]);
    free(m->slot);
    free(m);
}

static size_t id_hash(uint64_t id)
{
    id ^= id >> 33;
    id *= 0xff51afd7ed558ccdull;
    id ^= id >> 33;
    return (size_t)id;
}

/* The slot of @id: its rule's, or the empty one where it would go. */
static size_t find_slot(struct qrule *const *slot, size_t cap, uint64_t id)
{
    size_t i = id_hash(id) & (cap - 1);

    while (slot[i] && slot[i]->r.id != id)
        i = (i + 1) & (cap - 1);
    return i;
}

static int grow(struct dlog_query_rules *m)
{
    size_t cap = m->cap * 2;
    struct qrule **slot = calloc(cap, sizeof(*slot));

    if (!slot)
        return -ENOMEM;
    for (size_t i = 0; i < m->cap; i++) {
        if (m->slot[i])
            slot[find_slot(slot, cap, m->slot[i]->r.id)] = m->slot[i];
    }
    free(m->slot);
    m->slot = slot;
    m->cap = cap;
    return 0;
}

/* A copy of @src with its strings (NUL-terminated) in one allocation. */
static struct qrule *qrule_copy(const struct dlog_rule *src)
{
    struct qrule *q = calloc(1, sizeof(*q));
    size_t len = (size_t)src->id_len + 1, pos;
    unsigned n_actor = src->n_actor < RULES_ACTOR_KEYS_MAX ? src->n_actor
                                                           : RULES_ACTOR_KEYS_MAX;

    if (!q)
        return NULL;
    for (unsigned i = 0; i < n_actor; i++)
        len += (size_t)src->actor_len[i] + 1;
    q->strs = malloc(len);
    if (!q->strs) {
        free(q);
        return NULL;
    }
    q->strs_len = len;
    q->r = *src;
    q->r.n_actor = n_actor;
    memcpy(q->strs, src->id_str, src->id_len);
    q->strs[src->id_len] = '\0';
    q->r.id_str = q->strs;
    pos = (size_t)src->id_len + 1;
    for (unsigned i = 0; i < n_actor; i++) {
        memcpy(q->strs + pos, src->actor[i], src->actor_len[i]);
        q->strs[pos + src->actor_len[i]] = '\0';
        q->r.actor[i] = q->strs + pos;
        pos += (size_t)src->actor_len[i] + 1;
    }
    return q;
}

int dlog_query_rules_add(struct dlog_query_rules *m, const struct dlog_rules *r)
{
    int ret = 0;

    for (unsigned k = 0; k < r->n; k++) {
        struct qrule *q;
        size_t i;

        if (m->n + 1 > m->cap / 2 && m->n < DLOG_QUERY_RULES_MAX && grow(m) < 0)
            return -ENOMEM;
        i = find_slot(m->slot, m->cap, r->rule[k].id);
        if (!m->slot[i] && m->n >= DLOG_QUERY_RULES_MAX) {
            ret = -E2BIG;
            continue;
        }
        q = qrule_copy(&r->rule[k]);
        if (!q)
            return -ENOMEM;
        if (m->bytes - (m->slot[i] ? m->slot[i]->strs_len : 0) + q->strs_len >
            DLOG_QUERY_RULES_BYTES) {
            qrule_free(q);
            ret = -E2BIG;
            continue;
        }
        if (!m->slot[i])
            m->n++;
        else
            m->bytes -= m->slot[i]->strs_len;
        m->bytes += q->strs_len;
        qrule_free(m->slot[i]);
        m->slot[i] = q;
    }
    return ret;
}

const struct dlog_rule *dlog_query_rule(const struct dlog_query_rules *m, uint64_t id)
{
    size_t i = find_slot(m->slot, m->cap, id);

    return m->slot[i] ? &m->slot[i]->r : NULL;
}

const char *dlog_query_rule_name(const struct dlog_query_rules *m, uint64_t id, char *buf,
                                 size_t size)
{
    const struct dlog_rule *r = id ? dlog_query_rule(m, id) : NULL;

    if (r)
        return r->id_str;
    if (id)
        snprintf(buf, size, "%016" PRIx64, id);
    else if (size)
        buf[0] = '\0';
    return buf;
}

/* ---- filters ---------------------------------------------------------------------------- */

int dlog_query_verdict_parse(const char *text, enum dlog_query_verdict *ret)
{
    if (strcmp(text, "allowed") == 0)
        *ret = DLOG_QUERY_ALLOWED;
    else if (strcmp(text, "denied") == 0)
        *ret = DLOG_QUERY_DENIED;
    else if (strcmp(text, "error") == 0)
        *ret = DLOG_QUERY_ERROR;
    else
        return -EINVAL;
    return 0;
}

bool dlog_query_rule_is(const struct dlog_rule *r, uint64_t id, const char *name)
{
    char hex[DLOG_QUERY_ID_LEN + 1];

    if (id == 0)
        return false;
    if (r && strlen(name) == r->id_len && memcmp(name, r->id_str, r->id_len) == 0)
        return true;
    snprintf(hex, sizeof(hex), "%016" PRIx64, id);
    return strcasecmp(name, hex) == 0;
}

/* The id of the rule --rule names among those @d's request met, or 0. */
static uint64_t named_rule(const char *name, const struct dlog_query_rules *m,
                           const struct dlog_decision *d)
{
    if (dlog_query_rule_is(dlog_query_rule(m, d->decider_id), d->decider_id, name))
        return d->decider_id;
    for (unsigned i = 0; i < d->n_out && i < RULES_MATCH_MAX; i++) {
        uint64_t id = d->out[i].rule_id;

        if (dlog_query_rule_is(dlog_query_rule(m, id), id, name))
            return id;
    }
    return 0;
}

bool dlog_query_match(const struct dlog_query_filter *f, const struct dlog_query_rules *m,
                      const struct dlog_decision *d)
{
    uint64_t id = d->decider_id;

    if (d->unix_ms < f->since_ms || (f->until_ms && d->unix_ms >= f->until_ms))
        return false;
    switch (f->verdict) {
    case DLOG_QUERY_ANY:
        break;
    case DLOG_QUERY_ALLOWED:
        if ((d->flags & DLOG_F_ERROR) || !(d->flags & DLOG_F_ALLOWED))
            return false;
        break;
    case DLOG_QUERY_DENIED:
        if ((d->flags & DLOG_F_ERROR) || (d->flags & DLOG_F_ALLOWED))
            return false;
        break;
    case DLOG_QUERY_ERROR:
        if (!(d->flags & DLOG_F_ERROR))
            return false;
        break;
    }
    if (f->rule) {
        id = named_rule(f->rule, m, d);
        if (!id)
            return false;
    }
    if (f->actor) {
        const struct dlog_rule *r = id ? dlog_query_rule(m, id) : NULL;
        char buf[RULES_ACTOR_MAX];
        int len;

        if (!r)
            return false;
        len = dlog_actor(r, d, buf, sizeof(buf));
        if (len < 0 || (size_t)len != strlen(f->actor) || memcmp(buf, f->actor, (size_t)len))
            return false;
    }
    return true;
}
