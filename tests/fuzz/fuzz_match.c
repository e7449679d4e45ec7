/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness for the rule matcher (common/rules_match.c, common/glob.c).
 * The input is decoded into a random rule set (keys and values from a small
 * alphabet rich in '*' and '\', sometimes raw bytes; random policies and
 * sources; the default rule last) and random requests (some built to match
 * a chosen rule, some with more than PROTO_KV_MAX pairs).  rules_match() on
 * the compiled table, and on the table read back with
 * rules_from_blob(rules_blob()), must agree exactly with a slow reference
 * matcher written here from docs/rules.md alone: first match in config
 * order, presence / exact / glob values (glob by dynamic programming, no
 * greedy tricks), privileged source.  rules_why_not() must be "" exactly
 * for the rules the reference says match, and rules_describe() must read
 * back through proto_parse() as the configured match set.  A value the
 * reference finds malformed, or a key repeated in a rule, must make
 * rules_compile() fail.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diag.h"
#include "fuzz.h"
#include "proto.h"
#include "rules.h"

#define MAX_RULES     14
#define MAX_MATCH     5
#define STR_MAX       24
#define MAX_REQS      8
#define REQ_KV_MAX    (PROTO_KV_MAX + 8)    /* wide requests take the scan path */
#define VAL_MAX       160

static const char *const rule_keys[] = { "a", "b", "method", "path", "ip", "k*", "" };
static const char *const req_keys[] = { "a", "b", "method", "path", "ip", "k*", "c" };
static const char alphabet[] = "ab*\\/x";

/* ---- decoding ------------------------------------------------------------ */

/* A string of up to @max bytes, never NUL, '\n' or '"' (what a config and
 * a request can carry); mostly over the alphabet, sometimes raw bytes. */
static void gen_string(struct fz *f, char *buf, size_t max, bool rule)
{
    unsigned mode = fz_u8(f);
    size_t len;

    if (rule && mode % 8 == 0) {
        strcpy(buf, "*");
        return;
    }
    len = fz_below(f, (unsigned)max + 1);
    for (size_t i = 0; i < len; i++) {
        uint8_t b = fz_u8(f);

        if (mode & 0x80)
            buf[i] = b == 0 || b == '\n' || b == '"' ? 'q' : (char)b;
        else
            buf[i] = alphabet[b % (sizeof(alphabet) - 1)];
    }
    buf[len] = '\0';
}

static void gen_key(struct fz *f, char *buf, bool rule)
{
    unsigned b = fz_u8(f);

    if (b >= 0xf0) {
        gen_string(f, buf, 4, false);
        if (!rule && buf[0] == '\0')
            strcpy(buf, "z");
        return;
    }
    if (rule)
        strcpy(buf, rule_keys[b % (sizeof(rule_keys) / sizeof(rule_keys[0]))]);
    else
        strcpy(buf, req_keys[b % (sizeof(req_keys) / sizeof(req_keys[0]))]);
}

static int build_spec(struct fz *f, struct rules_spec *spec)
{
    unsigned n = 1 + fz_below(f, MAX_RULES);
    struct rules_rule_spec *r;
    char key[STR_MAX + 1], value[STR_MAX + 1], label[16];
    int rc;

    for (unsigned i = 0; i < n; i++) {
        unsigned flags = fz_u8(f), n_match = fz_below(f, MAX_MATCH + 1);

        rc = rules_spec_add(spec, "fuzz", i + 1, &r);
        if (rc < 0)
            return rc;
        r->credit_limit = 10;
        r->reset_seconds = 60;
        /* Stop rules hide later ones (rejected as unreachable): prefer side rules. */
        r->policy = flags % 4 == 0 ? RULES_POLICY_STOP
                    : flags % 4 == 1 ? RULES_POLICY_CANARY : RULES_POLICY_CONTINUE;
        if (flags & 0x10)
            r->source = RULES_SOURCE_PRIVILEGED;
        if (!(flags & 0x20)) {
            /* Labelled rules never share an id; unlabelled ones test the id. */
            snprintf(label, sizeof(label), "r%u", i);
            r->label = strdup(label);
            if (!r->label)
                return -ENOMEM;
        }
        for (unsigned j = 0; j < n_match; j++) {
            gen_key(f, key, true);
            gen_string(f, value, STR_MAX, true);
            rc = rules_spec_add_match(r, key, value, 0);
            if (rc < 0)
                return rc;
        }
    }
    rc = rules_spec_add(spec, "fuzz", n + 1, &r);
    if (rc < 0)
        return rc;
    r->credit_limit = 10;
    r->reset_seconds = 60;
    r->is_default = true;
    return 0;
}

/* ---- the reference matcher ----------------------------------------------- */

enum ref_kind { REF_BAD = -1, REF_PRESENT, REF_EXACT, REF_GLOB };

struct ref_tok {
    bool star;
    char ch;
};

/* docs/rules.md "Values", read literally. */
static enum ref_kind ref_parse(const char *v, struct ref_tok *tok, size_t *ret_n)
{
    size_t n = 0;
    bool star = false;

    if (strcmp(v, "*") == 0)
        return REF_PRESENT;
    for (size_t i = 0; v[i]; i++) {
        if (v[i] == '\\') {
            if (v[i + 1] != '*' && v[i + 1] != '\\')
                return REF_BAD;
            tok[n++] = (struct ref_tok){ false, v[++i] };
        } else if (v[i] == '*') {
            tok[n++] = (struct ref_tok){ true, 0 };
            star = true;
        } else {
            tok[n++] = (struct ref_tok){ false, v[i] };
        }
    }
    *ret_n = n;
    return star ? REF_GLOB : REF_EXACT;
}

/* Whether @tok[0..n) matches all of @s[0..len): m[i][j] = tok[i..] matches s[j..]. */
static bool ref_glob(const struct ref_tok *tok, size_t n, const char *s, size_t len)
{
    static bool m[STR_MAX + 2][VAL_MAX + 2];

    if (len > VAL_MAX)
        abort();
    for (size_t j = 0; j <= len; j++)
        m[n][j] = j == len;
    for (size_t i = n; i-- > 0;) {
        for (size_t j = len + 1; j-- > 0;) {
            if (tok[i].star)
                m[i][j] = m[i + 1][j] || (j < len && m[i][j + 1]);
            else
                m[i][j] = j < len && s[j] == tok[i].ch && m[i + 1][j + 1];
        }
    }
    return m[0][0];
}

static bool ref_value(const char *pat, const char *s, size_t len)
{
    struct ref_tok tok[STR_MAX + 1];
    size_t n = 0;

    switch (ref_parse(pat, tok, &n)) {
    case REF_PRESENT:
        return true;
    case REF_EXACT:
        if (n != len)
            return false;
        for (size_t i = 0; i < n; i++) {
            if (tok[i].ch != s[i])
                return false;
        }
        return true;
    case REF_GLOB:
        return ref_glob(tok, n, s, len);
    default:
        abort();                /* compiled sets have no malformed values */
    }
}

static bool ref_rule(const struct rules_rule_spec *r, const struct rules_req *req)
{
    if (r->source == RULES_SOURCE_PRIVILEGED && !req->privileged)
        return false;
    for (size_t j = 0; j < r->n_match; j++) {
        const struct proto_kv *kv = NULL;
        size_t klen = strlen(r->match[j].key);

        for (unsigned i = 0; i < req->n_kv; i++) {
            if (req->kv[i].key_len == klen && memcmp(req->kv[i].key, r->match[j].key, klen) == 0)
                kv = &req->kv[i];
        }
        if (!kv || !ref_value(r->match[j].value, kv->value, kv->value_len))
            return false;
    }
    return true;
}

static size_t ref_match(const struct rules_spec *spec, const struct rules_req *req,
                        uint32_t ret[RULES_MATCH_MAX])
{
    size_t n = 0;

    for (size_t i = 0; i < spec->n; i++) {
        if (!ref_rule(&spec->rules[i], req))
            continue;
        ret[n++] = (uint32_t)i;
        if (spec->rules[i].policy == RULES_POLICY_STOP || n == RULES_MATCH_MAX)
            break;
    }
    return n;
}

/* What rules_compile() must reject whatever else is in the set. */
static bool ref_must_reject(const struct rules_spec *spec)
{
    struct ref_tok tok[STR_MAX + 1];
    size_t n;

    for (size_t i = 0; i < spec->n; i++) {
        const struct rules_rule_spec *r = &spec->rules[i];

        for (size_t j = 0; j < r->n_match; j++) {
            if (ref_parse(r->match[j].value, tok, &n) == REF_BAD)
                return true;
            for (size_t k = 0; k < j; k++) {
                if (strcmp(r->match[j].key, r->match[k].key) == 0)
                    return true;
            }
        }
    }
    return false;
}

/* ---- requests ------------------------------------------------------------ */

struct fuzz_req {
    char keys[REQ_KV_MAX][STR_MAX + 1];
    char values[REQ_KV_MAX][VAL_MAX + 1];
    struct proto_kv kv[REQ_KV_MAX];
    struct rules_req req;
};

static int kv_cmp(const void *x, const void *y)
{
    const struct proto_kv *a = x, *b = y;
    size_t n = a->key_len < b->key_len ? a->key_len : b->key_len;
    int c = memcmp(a->key, b->key, n);

    return c ? c : (a->key_len > b->key_len) - (a->key_len < b->key_len);
}

/* A value rule pattern @pat accepts: stars replaced by alphabet runs. */
static void witness(struct fz *f, const char *pat, char *out)
{
    struct ref_tok tok[STR_MAX + 1];
    size_t n = 0, len = 0;
    enum ref_kind kind = ref_parse(pat, tok, &n);

    if (kind == REF_PRESENT || kind == REF_BAD) {
        gen_string(f, out, 4, false);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        if (!tok[i].star) {
            out[len++] = tok[i].ch;
            continue;
        }
        for (unsigned k = fz_below(f, 4); k > 0; k--)
            out[len++] = alphabet[fz_u8(f) % (sizeof(alphabet) - 1)];
    }
    out[len] = '\0';
}

static void build_req(struct fz *f, const struct rules_spec *spec, struct fuzz_req *q)
{
    unsigned mode = fz_u8(f), n = 0, m = 0;

    if (mode & 1) {
        /* Aim at one rule: its keys with values it accepts. */
        const struct rules_rule_spec *r = &spec->rules[fz_below(f, (unsigned)spec->n)];

        for (size_t j = 0; j < r->n_match && n < REQ_KV_MAX; j++) {
            if (r->match[j].key[0] == '\0')
                continue;
            snprintf(q->keys[n], sizeof(q->keys[n]), "%s", r->match[j].key);
            witness(f, r->match[j].value, q->values[n]);
            n++;
        }
    }
    for (unsigned extra = fz_below(f, 5); extra > 0 && n < REQ_KV_MAX; extra--, n++) {
        gen_key(f, q->keys[n], false);
        gen_string(f, q->values[n], STR_MAX, false);
    }
    if ((mode & 0x3e) == 0x3e) {
        /* More pairs than proto_parse() allows: rules_match() scans. */
        while (n < PROTO_KV_MAX + 1 + (mode >> 7) * 4) {
            snprintf(q->keys[n], sizeof(q->keys[n]), "~%02u", n);
            snprintf(q->values[n], sizeof(q->values[n]), "v");
            n++;
        }
    }
    for (unsigned i = 0; i < n; i++) {
        q->kv[i] = (struct proto_kv){ .key = q->keys[i], .value = q->values[i],
                                      .key_len = (uint16_t)strlen(q->keys[i]),
                                      .value_len = (uint16_t)strlen(q->values[i]) };
    }
    /* As proto_parse() leaves a request: sorted, unique keys, the last value wins. */
    for (unsigned i = 0; i < n; i++) {
        bool later = false;

        for (unsigned k = i + 1; k < n; k++)
            later |= kv_cmp(&q->kv[i], &q->kv[k]) == 0;
        if (!later)
            q->kv[m++] = q->kv[i];
    }
    qsort(q->kv, m, sizeof(q->kv[0]), kv_cmp);
    q->req = (struct rules_req){ .kv = q->kv, .n_kv = m, .privileged = mode & 0x40 };
}

/* ---- checks -------------------------------------------------------------- */

static void check_match(const struct rules_spec *spec, const struct rules *rules,
                        const struct rules *again, const struct rules_req *req)
{
    uint32_t want[RULES_MATCH_MAX], got[RULES_MATCH_MAX], got2[RULES_MATCH_MAX];
    size_t n_want = ref_match(spec, req, want);
    size_t n_got = rules_match(rules, req, got);
    size_t n_got2 = rules_match(again, req, got2);
    char why[PROTO_LINE_MAX * 2];

    if (n_got != n_want || memcmp(got, want, n_want * sizeof(want[0])) != 0) {
        fprintf(stderr, "request (privileged %d):", req->privileged);
        for (unsigned i = 0; i < req->n_kv; i++)
            fprintf(stderr, " [%s]=[%s]", req->kv[i].key, req->kv[i].value);
        fprintf(stderr, "\nreference:");
        for (size_t i = 0; i < n_want; i++)
            fprintf(stderr, " %u", want[i]);
        fprintf(stderr, "\nrules_match:");
        for (size_t i = 0; i < n_got; i++)
            fprintf(stderr, " %u", got[i]);
        fprintf(stderr, "\n");
        CHECK(!"rules_match() differs from the reference matcher");
    }
    CHECK(n_got2 == n_got && memcmp(got2, got, n_got * sizeof(got[0])) == 0);
    CHECK(n_got >= 1);
    CHECK(spec->rules[got[n_got - 1]].policy == RULES_POLICY_STOP);

    for (size_t i = 0; i < spec->n; i++) {
        int len = rules_why_not(rules, (uint32_t)i, req, why, sizeof(why));

        CHECK(len >= 0);
        CHECK((len == 0) == ref_rule(&spec->rules[i], req));
    }
}

/* rules_describe() reads back through proto_parse() as the configured set. */
static void check_describe(const struct rules_spec *spec, const struct rules *rules, size_t i)
{
    const struct rules_rule_spec *r = &spec->rules[i];
    static struct proto_req req;
    char line[PROTO_LINE_MAX * 2];
    bool plain = true;
    int len;

    len = rules_describe(rules, (uint32_t)i, line + 4, sizeof(line) - 6);
    CHECK(len >= 0);
    if (r->is_default) {
        CHECK(strcmp(line + 4, "default") == 0);
        return;
    }
    if (r->n_match == 0) {
        CHECK(len == 0);
        return;
    }
    for (size_t j = 0; j < r->n_match; j++) {
        /* What the protocol cannot carry: an empty key, '"' or a newline. */
        plain &= r->match[j].key[0] != '\0' && !strpbrk(r->match[j].key, "\"\n") &&
                 !strpbrk(r->match[j].value, "\"\n");
    }
    if (!plain)
        return;
    memcpy(line, "HIT ", 4);
    line[4 + len] = '\n';
    CHECK(proto_parse(line, (size_t)len + 5, &req) == len + 5);
    CHECK(req.err == PROTO_E_NONE);
    CHECK(req.n_kv == r->n_match);
    for (size_t j = 0; j < r->n_match; j++) {
        const struct proto_kv *kv = proto_find(&req, r->match[j].key, strlen(r->match[j].key));

        CHECK(kv != NULL);
        CHECK(kv->value_len == strlen(r->match[j].value));
        CHECK(memcmp(kv->value, r->match[j].value, kv->value_len) == 0);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct fuzz_req q;
    struct fz f = { data, size };
    struct rules_spec spec = { 0 };
    struct rules *rules = NULL, *again = NULL;
    struct diag diag;
    const void *blob;
    size_t blob_len;
    int r;

    diag_init(&diag);
    if (build_spec(&f, &spec) < 0)
        goto out;
    r = rules_compile(&spec, 7, &rules, &diag);
    if (ref_must_reject(&spec))
        CHECK(r == -EINVAL);
    if (r < 0) {
        CHECK(r == -EINVAL || r == -ENOMEM);
        CHECK(r == -ENOMEM || diag.n > 0);
        goto out;
    }
    CHECK(rules_count(rules) == spec.n);
    rules_blob(rules, &blob, &blob_len);
    CHECK(rules_from_blob(blob, blob_len, &again) == 0);
    CHECK(rules_generation(again) == 7);
    for (size_t i = 0; i < spec.n; i++) {
        struct rules_rule a, b;

        CHECK(rules_get(rules, (uint32_t)i, &a) == 0);
        CHECK(rules_get(again, (uint32_t)i, &b) == 0);
        CHECK(a.id == b.id && strcmp(a.id_str, b.id_str) == 0);
        CHECK(a.policy == spec.rules[i].policy && a.source == spec.rules[i].source);
        CHECK(a.is_default == spec.rules[i].is_default);
        check_describe(&spec, rules, i);
    }
    for (unsigned k = 0; k < MAX_REQS && !fz_empty(&f); k++) {
        build_req(&f, &spec, &q);
        check_match(&spec, rules, again, &q.req);
    }
out:
    rules_free(again);
    rules_free(rules);
    rules_spec_free(&spec);
    return 0;
}
