/* SPDX-License-Identifier: MIT */
/*
 * store_link_reply: a link's answers (see store_link.c, store_int.h): each
 * decoded for its request's callback (daemon/store_script.c), a NOSCRIPT
 * retried after SCRIPT LOAD, the handshake's end marking the link ready
 * (its breaker closes), a cluster's redirection handed to the router, and
 * any other error failing the connection.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "log.h"
#include "store.h"
#include "store_int.h"
#include "store_link_int.h"
#include "store_slots.h"

static struct log_ratelimit rl_error;

/* ---- replies ------------------------------------------------------------------------- */

/* A user request's answer: the script's (store_script.c), SCAN's, or DEL's count. */
static int decode_reply(const struct sreq *q, const redisReply *r, struct store_reply *ret)
{
    if (q->cmd == STORE_CMD_CALL)
        return store_script_decode(q->call.script, r, ret);
    if (q->cmd == STORE_CMD_SCAN)
        return store_script_decode_scan(r, ret);
    return store_script_decode_del(r, ret);
}

void store_link_finish(struct store_link *sc, struct sreq *q, const struct store_reply *rep)
{
    store_cb *cb = q->cb;
    store_raw_cb *raw = q->raw_cb;
    void *arg = q->arg;

    store_link_req_free(sc, q);
    if (raw)
        raw(arg, NULL);         /* a raw request that got an answer never comes here */
    else if (cb)
        cb(arg, rep);
}

/* ROLE's answer: "master" first, then the replication offset and replicas. */
static bool role_is_master(const redisReply *r)
{
    return r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
           (r->element[0]->type == REDIS_REPLY_STRING ||
            r->element[0]->type == REDIS_REPLY_STATUS) &&
           strcmp(r->element[0]->str, "master") == 0;
}

void store_link_on_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct sreq *q = privdata;
    struct store_link *sc = q->sc;
    redisReply *r = reply;
    struct store_reply rep;
    char why[200];

    store_link_fifo_remove(sc, q);
    if (!r) {
        /* The context is going away (an error, our timeout, shutdown). */
        if (sc->ac == ac)
            store_link_fail(sc, ac->errstr[0] ? ac->errstr : "connection lost", false);
        if (q->kind == REQ_USER)
            store_inc(&sc->st->errors);
        store_link_finish(sc, q, NULL);
        return;
    }
    if (q->kind == REQ_RAW) {
        /* The router's own question: its answer, an error included, is the
         * router's to judge; the connection is fine either way. */
        store_raw_cb *raw = q->raw_cb;
        void *raw_arg = q->arg;

        if (r->type == REDIS_REPLY_ERROR)
            log_ratelimited(&rl_error, LOG_ERR, "redis %s: error reply: %.160s",
                            sc->br->name, r->str);
        store_link_req_free(sc, q);
        raw(raw_arg, r->type == REDIS_REPLY_ERROR ? NULL : r);
        return;
    }
    if (r->type == REDIS_REPLY_ERROR && q->kind == REQ_USER && sc->hooks.redirect &&
        store_slots_redirect(r->str, &(struct store_redirect_to){ 0 }) != STORE_REDIRECT_NONE) {
        /* A cluster's redirection: the router resends or fails the request;
         * this node is fine. */
        void *req_arg = q->arg;

        store_link_req_free(sc, q);
        sc->hooks.redirect(req_arg, r->str);
        return;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        /* After SCRIPT FLUSH or a failover: load it again, retry once. */
        if (q->kind == REQ_USER && q->cmd == STORE_CMD_CALL &&
            strncmp(r->str, "NOSCRIPT", 8) == 0 && q->retries < NOSCRIPT_RETRIES &&
            sc->ac == ac) {
            store_inc(&sc->st->noscript);
            q->retries++;
            if (store_link_script_load(sc, q->call.script, REQ_IGNORE) >= 0 &&
                store_link_req_send(sc, q) >= 0)
                return;
        }
        snprintf(why, sizeof(why), "error reply: %.160s", r->str);
        log_ratelimited(&rl_error, LOG_ERR, "redis: %s", why);
        if (q->kind != REQ_IGNORE) {
            store_inc(&sc->st->errors);
            if (sc->ac == ac)
                store_link_fail(sc, why, true);
        }
        store_link_finish(sc, q, NULL);
        return;
    }
    if (q->kind == REQ_ROLE && sc->ac == ac && !role_is_master(r)) {
        snprintf(why, sizeof(why), "not a master: ROLE says %.40s",
                 r->type == REDIS_REPLY_ARRAY && r->elements && r->element[0]->str ?
                 r->element[0]->str : "something else");
        store_link_fail(sc, why, true);
        store_link_finish(sc, q, NULL);
        return;
    }
    if (q->kind == REQ_HANDSHAKE_LAST && sc->ac == ac) {
        sc->state = CONN_READY;
        sc->backoff_ms = 0;
        __atomic_fetch_add(&sc->st->conns_up, 1, __ATOMIC_RELAXED);
        store_untrip(sc->st, sc->br);
        if (sc->hooks.state)
            sc->hooks.state(sc->hooks.arg, sc, true);
    }
    if (q->kind != REQ_USER) {
        store_link_finish(sc, q, NULL);
        return;
    }
    if (decode_reply(q, r, &rep) < 0) {
        store_inc(&sc->st->errors);
        log_ratelimited(&rl_error, LOG_ERR, "redis: unexpected reply (type %d) to %s",
                        r->type, q->cmd == STORE_CMD_CALL ? store_script_name(q->call.script) :
                                 q->cmd == STORE_CMD_SCAN ? "SCAN" : "DEL");
        if (sc->ac == ac)
            store_link_fail(sc, "unexpected reply", true);
        store_link_finish(sc, q, NULL);
        return;
    }
    store_link_finish(sc, q, &rep);
}
