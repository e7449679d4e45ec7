/* SPDX-License-Identifier: MIT */
/*
 * resp_rl: handlers of the RESP commands on ad-hoc buckets (adhoc.h), for
 * resp_cmd.c's table: Smyte's RL.REDUCE, RL.GET, RL.PREDUCE, RL.PGET and
 * redis-cell's CL.THROTTLE (docs/resp.md).  The connection's thread.
 */
#ifndef DIVVY_RESP_RL_H
#define DIVVY_RESP_RL_H

struct conn;
struct resp_cmd;

void resp_rl_reduce(struct conn *c, const struct resp_cmd *cmd);
void resp_rl_get(struct conn *c, const struct resp_cmd *cmd);
void resp_rl_preduce(struct conn *c, const struct resp_cmd *cmd);
void resp_rl_pget(struct conn *c, const struct resp_cmd *cmd);
void resp_cl_throttle(struct conn *c, const struct resp_cmd *cmd);

#endif
