/* SPDX-License-Identifier: MIT */
/*
 * tzif: reads a time zone's TZif file (RFC 8536, versions 1 to 4) into the
 * records calendar windows compile into the rules blob (common/calendar.h):
 * the transitions' UTC offsets (the 64-bit data of a v2+ file, else the
 * 32-bit), the offset before them, and the footer's POSIX TZ rule for the
 * times after the last one (a "slim" file has few transitions and relies on
 * it).  divvyd and divvyctl only, at config load: clients read the compiled
 * records, never a zone file.  Never logs, never touches the environment
 * (no setenv("TZ"), no tzset()): thread-safe.
 */
#ifndef DIVVY_TZIF_H
#define DIVVY_TZIF_H

#include <stddef.h>
#include <stdint.h>

#include "calendar.h"

#define TZIF_DIR       "/usr/share/zoneinfo"
#define TZIF_FILE_MAX  (256 * 1024)     /* bytes of one zone file */

/*
 * Parses the TZif document @data (@len bytes, untrusted) into *ret_zone
 * (name left empty) and a new array *ret_trans of *ret_n transitions (the
 * caller frees it; NULL when there are none), transitions before 1900 folded
 * into the zone's initial offset, those after 9999 dropped, consecutive ones
 * with the same offset merged.  Zones with leap seconds ("right/...") are
 * refused.  On failure writes the reason to @why and returns -EINVAL
 * (malformed), -ENOMEM.
 */
int tzif_parse(const void *data, size_t len, struct calendar_zone *ret_zone,
               struct calendar_trans **ret_trans, uint32_t *ret_n, char *why, size_t why_len);

/*
 * Parses the POSIX TZ string @s (a TZif footer without its newlines, e.g.
 * "CET-1CEST,M3.5.0,M10.5.0/3") into @z's std_off, dst_off, has_dst, start
 * and end.  0 or -EINVAL.
 */
int tzif_posix_rule(const char *s, size_t len, struct calendar_zone *z);

/*
 * Whether @name can name a zone file under the zone directory: 1 to 47
 * bytes of [A-Za-z0-9_+-.] components separated by single '/', no
 * component starting with '.' (so never "..").
 */
int tzif_name_ok(const char *name);

/*
 * Reads zone @name ("Europe/Berlin") from TZIF_DIR and parses it
 * (tzif_parse()), the name copied into *ret_zone.  "UTC" needs no file
 * callers treat it apart.  -ENOENT (no such zone), -EINVAL (bad name or
 * malformed file: @why says which), -EFBIG, -ENOMEM, -errno.
 */
int tzif_load(const char *name, struct calendar_zone *ret_zone, struct calendar_trans **ret_trans,
              uint32_t *ret_n, char *why, size_t why_len);

#endif
