/* SPDX-License-Identifier: MIT */
/*
 * tzif: TZif files (RFC 8536) and their POSIX TZ footer into calendar zone
 * records (see tzif.h).  Every count is checked against the bytes left
 * before anything is read; a file that disagrees with itself is refused
 * with a reason, never half-read.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tzif.h"

#define HDR_LEN 44

struct counts {
    uint32_t isut, isstd, leap, time, type, chars;
};

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int64_t be64(const uint8_t *p)
{
    return (int64_t)((uint64_t)be32(p) << 32 | be32(p + 4));
}

static int fail(char *why, size_t why_len, const char *msg)
{
    snprintf(why, why_len, "%s", msg);
    return -EINVAL;
}

/* Reads a header at @p (@left bytes) into *c and its data block's length
 * into *ret_len; false when it is not one or its block is cut short. */
static bool header(const uint8_t *p, size_t left, size_t tsize, struct counts *c,
                   size_t *ret_len)
{
    uint64_t n;

    if (left < HDR_LEN || memcmp(p, "TZif", 4) != 0)
        return false;
    c->isut = be32(p + 20);
    c->isstd = be32(p + 24);
    c->leap = be32(p + 28);
    c->time = be32(p + 32);
    c->type = be32(p + 36);
    c->chars = be32(p + 40);
    n = (uint64_t)c->time * (tsize + 1) + (uint64_t)c->type * 6 + c->chars +
        (uint64_t)c->leap * (tsize + 4) + c->isstd + c->isut;
    if (n > left - HDR_LEN)
        return false;
    *ret_len = (size_t)n;
    return true;
}

/* ---- the POSIX TZ footer ------------------------------------------------ */

struct cur {
    const char *p, *end;
};

static bool more(const struct cur *c)
{
    return c->p < c->end;
}

static bool num(struct cur *c, long max, long *ret)
{
    long v = 0;

    if (!more(c) || *c->p < '0' || *c->p > '9')
        return false;
    while (more(c) && *c->p >= '0' && *c->p <= '9') {
        v = v * 10 + (*c->p++ - '0');
        if (v > max)
            return false;
    }
    *ret = v;
    return true;
}

/* [+-]hh[:mm[:ss]], hours up to @hmax. */
static bool hms(struct cur *c, long hmax, long *ret)
{
    long h, m = 0, s = 0, sign = 1;

    if (more(c) && (*c->p == '+' || *c->p == '-'))
        sign = *c->p++ == '-' ? -1 : 1;
    if (!num(c, hmax, &h))
        return false;
    if (more(c) && *c->p == ':') {
        c->p++;
        if (!num(c, 59, &m))
            return false;
        if (more(c) && *c->p == ':') {
            c->p++;
            if (!num(c, 59, &s))
                return false;
        }
    }
    *ret = sign * (h * 3600 + m * 60 + s);
    return true;
}

/* A zone abbreviation: 3 or more letters, or <...> of alphanumerics, '+', '-'. */
static bool abbr(struct cur *c)
{
    const char *s = c->p;

    if (more(c) && *c->p == '<') {
        c->p++;
        while (more(c) && *c->p != '>') {
            char ch = *c->p;

            if (!((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
                  (ch >= '0' && ch <= '9') || ch == '+' || ch == '-'))
                return false;
            c->p++;
        }
        if (!more(c) || c->p - s < 4)
            return false;
        c->p++;
        return true;
    }
    while (more(c) && ((*c->p >= 'A' && *c->p <= 'Z') || (*c->p >= 'a' && *c->p <= 'z')))
        c->p++;
    return c->p - s >= 3;
}

static bool when(struct cur *c, struct calendar_when *w)
{
    long v, m, wk, d, t = 2 * 3600;

    memset(w, 0, sizeof(*w));
    if (more(c) && *c->p == 'M') {
        c->p++;
        if (!num(c, 12, &m) || m < 1 || !more(c) || *c->p++ != '.' || !num(c, 5, &wk) ||
            wk < 1 || !more(c) || *c->p++ != '.' || !num(c, 6, &d))
            return false;
        w->kind = CALENDAR_WHEN_MWD;
        w->month = (uint8_t)m;
        w->week = (uint8_t)wk;
        w->wday = (uint8_t)d;
    } else if (more(c) && *c->p == 'J') {
        c->p++;
        if (!num(c, 365, &v) || v < 1)
            return false;
        w->kind = CALENDAR_WHEN_JULIAN1;
        w->day = (uint16_t)v;
    } else {
        if (!num(c, 365, &v))
            return false;
        w->kind = CALENDAR_WHEN_JULIAN0;
        w->day = (uint16_t)v;
    }
    if (more(c) && *c->p == '/') {
        c->p++;
        if (!hms(c, 167, &t))
            return false;
    }
    w->secs = (int32_t)t;
    return true;
}

int tzif_posix_rule(const char *s, size_t len, struct calendar_zone *z)
{
    struct cur c = { s, s + len };
    long std, dst;

    if (!abbr(&c) || !hms(&c, 24, &std))
        return -EINVAL;
    /* POSIX counts west of Greenwich: "CET-1" is one hour east. */
    z->std_off = (int32_t)-std;
    z->dst_off = z->std_off;
    z->has_dst = 0;
    if (!more(&c))
        return 0;
    if (!abbr(&c))
        return -EINVAL;
    z->has_dst = 1;
    z->dst_off = z->std_off + 3600;
    if (more(&c) && *c.p != ',') {
        if (!hms(&c, 24, &dst))
            return -EINVAL;
        z->dst_off = (int32_t)-dst;
    }
    if (!more(&c)) {
        /* No rule: POSIX leaves it to the implementation; tzcode's default. */
        z->start = (struct calendar_when){ .kind = CALENDAR_WHEN_MWD, .month = 3, .week = 2,
                                           .secs = 7200 };
        z->end = (struct calendar_when){ .kind = CALENDAR_WHEN_MWD, .month = 11, .week = 1,
                                         .secs = 7200 };
        return 0;
    }
    if (*c.p++ != ',' || !when(&c, &z->start) || !more(&c) || *c.p++ != ',' ||
        !when(&c, &z->end) || more(&c))
        return -EINVAL;
    return 0;
}

/* ---- the TZif file ------------------------------------------------------ */

/* The transitions of a data block with @tsize-byte times, folded and merged
 * (tzif.h).  @p points after the block's header. */
static int transitions(const uint8_t *p, const struct counts *c, size_t tsize,
                       struct calendar_zone *z, struct calendar_trans **ret, uint32_t *ret_n,
                       char *why, size_t why_len)
{
    const uint8_t *idx = p + (size_t)c->time * tsize, *types = idx + c->time;
    struct calendar_trans *out = NULL;
    uint32_t n = 0;

    if (c->type < 1 || c->chars < 1)
        return fail(why, why_len, "no local time type");
    if ((c->isstd && c->isstd != c->type) || (c->isut && c->isut != c->type))
        return fail(why, why_len, "indicator counts differ from the type count");
    if (c->leap)
        return fail(why, why_len, "zones with leap seconds (\"right/...\") are not supported");
    for (uint32_t i = 0; i < c->type; i++) {
        int32_t off = (int32_t)be32(types + 6 * (size_t)i);

        if (off < CALENDAR_OFF_MIN || off > CALENDAR_OFF_MAX)
            return fail(why, why_len, "a UTC offset is out of range");
        if (types[6 * (size_t)i + 4] > 1 || types[6 * (size_t)i + 5] >= c->chars)
            return fail(why, why_len, "a local time type is malformed");
    }
    if (c->time) {
        out = calloc(c->time, sizeof(*out));
        if (!out)
            return -ENOMEM;
    }
    z->off0 = (int32_t)be32(types);     /* type 0 before the first transition */
    for (uint32_t i = 0; i < c->time; i++) {
        int64_t at = tsize == 8 ? be64(p + 8 * (size_t)i) : (int32_t)be32(p + 4 * (size_t)i);
        int32_t off;

        if (idx[i] >= c->type || (i && at <= (tsize == 8 ? be64(p + 8 * (size_t)(i - 1))
                                                    : (int32_t)be32(p + 4 * (size_t)(i - 1))))) {
            free(out);
            return fail(why, why_len, "transitions are not in ascending order with valid types");
        }
        off = (int32_t)be32(types + 6 * (size_t)idx[i]);
        if (at < CALENDAR_T_MIN) {
            z->off0 = off;              /* before 1900: only the offset it leaves */
        } else if (at <= CALENDAR_T_MAX &&
                   off != (n ? out[n - 1].off : z->off0)) {
            out[n].at = at;
            out[n].off = off;
            n++;
        }
    }
    z->std_off = n ? out[n - 1].off : z->off0;
    z->dst_off = z->std_off;
    if (n > CALENDAR_TRANS_MAX) {
        free(out);
        return fail(why, why_len, "too many transitions");
    }
    *ret = out;
    *ret_n = n;
    return 0;
}

int tzif_parse(const void *data, size_t len, struct calendar_zone *ret_zone,
               struct calendar_trans **ret_trans, uint32_t *ret_n, char *why, size_t why_len)
{
    const uint8_t *p = data;
    struct calendar_zone z;
    struct counts c1, c2;
    size_t n1, n2, off;
    const char *foot, *nl;
    int r;

    memset(&z, 0, sizeof(z));
    if (len < HDR_LEN || memcmp(p, "TZif", 4) != 0)
        return fail(why, why_len, "not a TZif file");
    if (!header(p, len, 4, &c1, &n1))
        return fail(why, why_len, "TZif data is truncated");
    if (p[4] == 0) {
        r = transitions(p + HDR_LEN, &c1, 4, &z, ret_trans, ret_n, why, why_len);
        if (r < 0)
            return r;
        *ret_zone = z;
        return 0;
    }
    if (p[4] < '2' || p[4] > '4')
        return fail(why, why_len, "unknown TZif version");
    off = HDR_LEN + n1;
    if (!header(p + off, len - off, 8, &c2, &n2) || p[off + 4] != p[4])
        return fail(why, why_len, "TZif v2+ data is missing or truncated");
    off += HDR_LEN;
    r = transitions(p + off, &c2, 8, &z, ret_trans, ret_n, why, why_len);
    if (r < 0)
        return r;
    off += n2;
    /* The footer: "\n" TZ string "\n"; empty: no rule past the last transition. */
    foot = (const char *)p + off;
    if (len - off < 2 || foot[0] != '\n' ||
        !(nl = memchr(foot + 1, '\n', len - off - 1))) {
        r = fail(why, why_len, "the TZif footer is missing");
        goto bad;
    }
    if (nl > foot + 1 && tzif_posix_rule(foot + 1, (size_t)(nl - foot - 1), &z) < 0) {
        r = fail(why, why_len, "the TZif footer's TZ rule is malformed");
        goto bad;
    }
    *ret_zone = z;
    return 0;
bad:
    free(*ret_trans);
    *ret_trans = NULL;
    return r;
}

int tzif_name_ok(const char *name)
{
    size_t n = strlen(name);
    bool start = true;

    if (n < 1 || n >= CALENDAR_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char ch = name[i];

        if (ch == '/') {
            if (start)
                return false;
            start = true;
            continue;
        }
        if (start && ch == '.')
            return false;
        if (!((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
              ch == '_' || ch == '+' || ch == '-' || ch == '.'))
            return false;
        start = false;
    }
    return !start;
}

int tzif_load(const char *name, struct calendar_zone *ret_zone, struct calendar_trans **ret_trans,
              uint32_t *ret_n, char *why, size_t why_len)
{
    char path[sizeof(TZIF_DIR) + CALENDAR_NAME_MAX + 1];
    uint8_t *buf = NULL;
    size_t len = 0;
    ssize_t got;
    int fd = -1, r;

    if (!tzif_name_ok(name))
        return fail(why, why_len, "not a time zone name (e.g. \"Europe/Berlin\")");
    snprintf(path, sizeof(path), "%s/%s", TZIF_DIR, name);
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
        r = -errno;
        snprintf(why, why_len, "%s: %s", path, strerror(-r));
        return r;
    }
    buf = malloc(TZIF_FILE_MAX + 1);
    if (!buf) {
        r = -ENOMEM;
        goto out;
    }
    while (len <= TZIF_FILE_MAX && (got = read(fd, buf + len, TZIF_FILE_MAX + 1 - len)) != 0) {
        if (got < 0) {
            r = -errno;
            snprintf(why, why_len, "%s: %s", path, strerror(-r));
            goto out;
        }
        len += (size_t)got;
    }
    if (len > TZIF_FILE_MAX) {
        snprintf(why, why_len, "%s: larger than %d bytes", path, TZIF_FILE_MAX);
        r = -EFBIG;
        goto out;
    }
    r = tzif_parse(buf, len, ret_zone, ret_trans, ret_n, why, why_len);
    if (r == 0)
        snprintf(ret_zone->name, sizeof(ret_zone->name), "%s", name);
out:
    free(buf);
    close(fd);
    return r;
}
