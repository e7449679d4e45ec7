/* SPDX-License-Identifier: MIT */
/*
 * admin_reload: the admin verbs that change the rules (docs/protocol.md
 * "RELOAD" and "DROPIN"): RELOAD [diff=true] [dry_run=true], and DROPIN, the
 * rules service that adds, removes and lists include_dir's drop-in rule files
 * through reload_apply() (validated with the main config, written only when
 * valid, applied by the same reload).  Both run reload_apply() on the
 * connection's thread, as RELOAD always has; the reply is reload_diff's
 * report.  The verb table has refused both to non-admin peers already.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <urcu/urcu-memb.h>

#include "admin.h"
#include "config.h"
#include "conn.h"
#include "line_reply.h"
#include "proto.h"
#include "reload.h"
#include "srv_int.h"
#include "worker_int.h"

#define DROPIN_TEXT_MAX 3072        /* decoded bytes: what one request line carries */

/* "true" or "false" of key @key (default false); -EINVAL for another value. */
static int flag(const struct proto_req *req, const char *key, bool *ret)
{
    const struct proto_kv *kv = proto_find(req, key, strlen(key));

    *ret = false;
    if (!kv)
        return 0;
    if (strcmp(kv->value, "true") == 0)
        *ret = true;
    else if (strcmp(kv->value, "false") != 0)
        return -EINVAL;
    return 0;
}

/* Whether @req carries no key but those of @keys. */
static bool only_keys(const struct proto_req *req, const char *const *keys, size_t n)
{
    for (unsigned i = 0; i < req->n_kv; i++) {
        size_t j = 0;

        while (j < n && strcmp(req->kv[i].key, keys[j]) != 0)
            j++;
        if (j == n)
            return false;
    }
    return true;
}

/* The report (docs/protocol.md "RELOAD"): a summary line, then the changes. */
static void reply_report(struct conn *c, const struct reload_result *res)
{
    char line[512];

    snprintf(line, sizeof(line),
             "OK %zu\nreloaded=%s generation=%llu rules=%zu added=%zu removed=%zu changed=%zu "
             "restart=%zu more=%zu\n",
             res->diff.n + 1, res->applied ? "true" : "false",
             (unsigned long long)res->generation, res->rules, res->diff.added,
             res->diff.removed, res->diff.changed, res->diff.restart, res->diff.dropped);
    line_text(c, line);
    for (size_t i = 0; i < res->diff.n && !c->dead; i++) {
        line_text(c, res->diff.lines[i]);
        line_text(c, "\n");
    }
}

/* Runs the reload of @opts and replies: @report, the report; else RELOAD's
 * one line.  A rejected config: ERR reload-failed "file:line: reason". */
static void run(struct conn *c, const char *verb, const struct reload_opts *opts, bool report)
{
    char who[64], err[DIAG_FILE_MAX + DIAG_MSG_MAX + 64], line[PROTO_REPLY_MAX];
    struct reload_result res = { 0 };

    snprintf(who, sizeof(who), "%s by uid %u", verb, (unsigned)c->uid);
    if (reload_apply(c->w->s->o.reload, who, opts, &res, err, sizeof(err)) < 0) {
        line_err(c, PROTO_E_RELOAD_FAILED, err);
    } else if (report) {
        reply_report(c, &res);
    } else {
        snprintf(line, sizeof(line), "OK reloaded generation=%llu rules=%zu\n",
                 (unsigned long long)res.generation, res.rules);
        line_text(c, line);
    }
    reload_result_free(&res);
}

void admin_reload(struct conn *c, const struct proto_req *req)
{
    static const char *const keys[] = { "diff", "dry_run" };
    struct reload_opts opts = { 0 };
    bool diff;

    if (!only_keys(req, keys, 2) || flag(req, "diff", &diff) < 0 ||
        flag(req, "dry_run", &opts.dry_run) < 0) {
        line_err(c, PROTO_E_BAD_REQUEST, "RELOAD takes only diff=true and dry_run=true");
        return;
    }
    /* Plain RELOAD keeps its one-line reply: a client that pipelines it
     * reads exactly one line, as before. */
    run(c, "RELOAD", &opts, diff || opts.dry_run);
}

/* ---- DROPIN: the rules service ---------------------------------------------------- */

static int b64_val(unsigned char ch)
{
    if (ch >= 'A' && ch <= 'Z')
        return ch - 'A';
    if (ch >= 'a' && ch <= 'z')
        return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9')
        return ch - '0' + 52;
    return ch == '+' ? 62 : ch == '/' ? 63 : -1;
}

/* Standard base64 (RFC 4648, padded) into @out; the length or -EINVAL. */
static ssize_t b64_decode(const char *in, size_t len, char *out, size_t size)
{
    size_t o = 0;

    if (len % 4)
        return -EINVAL;
    for (size_t i = 0; i < len; i += 4) {
        int v[4], pad = 0;

        for (int k = 0; k < 4; k++) {
            unsigned char ch = (unsigned char)in[i + k];

            if (ch == '=' && i + 4 == len && k >= 2) {
                v[k] = 0;
                pad++;
                continue;
            }
            if (pad || (v[k] = b64_val(ch)) < 0)
                return -EINVAL;
        }
        if (o + 3 - (size_t)pad > size)
            return -EMSGSIZE;
        out[o++] = (char)(v[0] << 2 | v[1] >> 4);
        if (pad < 2)
            out[o++] = (char)((v[1] & 15) << 4 | v[2] >> 2);
        if (pad < 1)
            out[o++] = (char)((v[2] & 3) << 6 | v[3]);
    }
    return (ssize_t)o;
}

/* op=list: the running rules that came from drop-ins (any file but the
 * main config), one line each. */
static void dropin_list(struct conn *c)
{
    const char *main_path = reload_config_path(c->w->s->o.reload);
    char line[2 * PROTO_LINE_MAX], desc[PROTO_LINE_MAX];
    const struct reload_state *st;
    struct rules_rule r;
    size_t n, count = 0;

    urcu_memb_read_lock();
    st = reload_current(c->w->s->o.reload);
    n = rules_count(st->rules);
    for (uint32_t i = 0; i < n; i++)
        count += rules_get(st->rules, i, &r) == 0 && strcmp(r.file, main_path) != 0;
    snprintf(line, sizeof(line), "OK %zu\n", count);
    line_text(c, line);
    for (uint32_t i = 0; i < n && count && !c->dead; i++) {
        const char *base, *dot;

        if (rules_get(st->rules, i, &r) < 0 || strcmp(r.file, main_path) == 0)
            continue;
        base = strrchr(r.file, '/');
        base = base ? base + 1 : r.file;
        dot = strrchr(base, '.');
        if (rules_describe(st->rules, i, desc, sizeof(desc)) < 0)
            snprintf(desc, sizeof(desc), "%s", "(too long)");
        for (char *p = desc; *p; p++)
            *p = *p == '"' ? '_' : *p;
        snprintf(line, sizeof(line),
                 "dropin=%.*s rule=%s index=%u line=%u credit_limit=%lld reset_seconds=%lld "
                 "match=\"%s\"\n",
                 (int)(dot ? (size_t)(dot - base) : strlen(base)), base, r.id_str, i, r.line,
                 (long long)r.credit_limit, (long long)r.reset_seconds, desc);
        line_text(c, line);
    }
    urcu_memb_read_unlock();
}

void admin_dropin(struct conn *c, const struct proto_req *req)
{
    static const char *const keys[] = { "op", "name", "text", "dry_run", "replace" };
    const struct proto_kv *op = proto_find(req, "op", 2);
    const struct proto_kv *name = proto_find(req, "name", 4);
    const struct proto_kv *text = proto_find(req, "text", 4);
    struct reload_opts opts = { 0 };
    struct config_edit edit = { 0 };
    char *buf = NULL;
    ssize_t len;

    if (!only_keys(req, keys, 5) || !op || flag(req, "dry_run", &opts.dry_run) < 0 ||
        flag(req, "replace", &edit.replace) < 0) {
        line_err(c, PROTO_E_BAD_REQUEST, "DROPIN op=list|add|remove [name=NN-NAME] "
                  "[text=BASE64] [replace=true] [dry_run=true]");
        return;
    }
    if (strcmp(op->value, "list") == 0 && !name && !text) {
        dropin_list(c);
        return;
    }
    if (!name || !config_dropin_name_ok(name->value) ||
        (strcmp(op->value, "add") == 0) != (text != NULL) ||
        (strcmp(op->value, "add") != 0 && strcmp(op->value, "remove") != 0)) {
        line_err(c, PROTO_E_BAD_REQUEST, "DROPIN op=add name=NN-NAME text=BASE64, or "
                  "op=remove name=NN-NAME (NN two digits, then letters, digits, - or _)");
        return;
    }
    edit.name = name->value;
    if (text) {
        buf = malloc(DROPIN_TEXT_MAX);
        if (!buf) {
            c->dead = true;
            return;
        }
        len = b64_decode(text->value, text->value_len, buf, DROPIN_TEXT_MAX);
        if (len < 0) {
            line_err(c, PROTO_E_BAD_REQUEST, "text= must be standard base64 (RFC 4648)");
            goto out;
        }
        edit.text = buf;
        edit.len = (size_t)len;
    }
    opts.edit = &edit;
    run(c, "DROPIN", &opts, true);
out:
    free(buf);
}
