/* SPDX-License-Identifier: MIT */
/*
 * harness_private: what the harness's own files share and the tests do not
 * see.  harness.c owns the registry of everything started (daemons,
 * connections, client processes, scratch memory, public copies) and the
 * daemons; harness_conn.c the raw connections and reply parsing;
 * harness_proc.c client processes and one-shot divvyd runs; harness_util.c
 * time, the environment and small file helpers.
 */
#ifndef DIVVY_HARNESS_PRIVATE_H
#define DIVVY_HARNESS_PRIVATE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "harness.h"

/* ---- harness_util.c --------------------------------------------------------- */

/* Milliseconds from now to @deadline (harness_now_ms()), 0 once past. */
int harness_remaining_ms(uint64_t deadline);
/* Writes @data to a new (or truncated) file @path, mode 0644; -errno. */
int harness_write_file(const char *path, const void *data, size_t len);
/* Reads the whole file @path into *@ret (malloc'd, NUL-terminated); -errno. */
int harness_read_file(const char *path, char **ret, size_t *ret_len);
/* "@dir/@name" into @buf; -ENAMETOOLONG. */
int harness_path_join(char buf[HARNESS_PATH], const char *dir, const char *name);

/* ---- harness.c: the registry ------------------------------------------------ */

/* Registers the atexit() cleanup once and notes the owning process. */
void harness_reg_init(void);
void harness_reg_add_child(pid_t pid);
void harness_reg_del_child(pid_t pid);
/* -ENOMEM when the registry cannot grow. */
int harness_reg_add_conn(struct harness_conn *c);
void harness_reg_del_conn(struct harness_conn *c);

#endif
