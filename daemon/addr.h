/* SPDX-License-Identifier: MIT */
/*
 * addr: the daemon's one parser of "HOST:PORT" / "[V6]:PORT" (the part after
 * "tcp:" in listen addresses, metrics.listen and socket-activation names).
 * Pure, thread-safe.
 */
#ifndef DIVVY_ADDR_H
#define DIVVY_ADDR_H

#include <stddef.h>

/*
 * Copies @hp into @buf (@size bytes) and points *ret_host and *ret_port into
 * it: "[::1]:8321" gives "::1" and "8321", "127.0.0.1:8321" splits at the
 * last ':', ":8321" gives an empty host.  -ENAMETOOLONG when @hp does not
 * fit, -EINVAL without a port.
 */
int addr_split_host_port(const char *hp, char *buf, size_t size, const char **ret_host,
                         const char **ret_port);

#endif
