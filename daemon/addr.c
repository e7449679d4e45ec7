/* SPDX-License-Identifier: MIT */
/* addr: "HOST:PORT" / "[V6]:PORT" splitting for the daemon (see addr.h). */
#include <errno.h>
#include <string.h>

#include "addr.h"

int addr_split_host_port(const char *hp, char *buf, size_t size, const char **ret_host,
                         const char **ret_port)
{
    char *sep;

    if (strlen(hp) >= size)
        return -ENAMETOOLONG;
    strcpy(buf, hp);
    if (buf[0] == '[') {
        sep = strchr(buf, ']');
        if (!sep || sep[1] != ':')
            return -EINVAL;
        *sep = '\0';
        *ret_host = buf + 1;
        *ret_port = sep + 2;
    } else {
        sep = strrchr(buf, ':');
        if (!sep)
            return -EINVAL;
        *sep = '\0';
        *ret_host = buf;
        *ret_port = sep + 1;
    }
    return **ret_port ? 0 : -EINVAL;
}
