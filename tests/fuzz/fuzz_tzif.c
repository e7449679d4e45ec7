/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness for server/tzif.c and common/calendar.c: the input is a
 * TZif file (the corpus holds real zones, v2+ with footers).  tzif_parse()
 * must refuse it or produce records calendar_check() accepts (the check
 * rules_from_blob() runs on a blob), and for accepted records every period
 * of every unit at a few instants from the input's tail must hold its
 * instant: start <= t < end, and end at most the unit's longest span plus
 * the widest swing of UTC offsets (a zone may move its clock by a day).  The POSIX TZ parser is also fed the raw input.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "calendar.h"
#include "fuzz.h"
#include "tzif.h"

static void periods(const struct calendar_zone *z, const struct calendar_trans *tr, int64_t t)
{
    const int64_t swing = CALENDAR_OFF_MAX - CALENDAR_OFF_MIN;

    for (int u = CALENDAR_HOUR; u <= CALENDAR_UNIT_MAX; u++) {
        int64_t s, e;
        int r = calendar_period(z, tr, (enum calendar_unit)u, t * 1000, &s, &e);

        CHECK(r == 0 || r == -ERANGE);
        if (r < 0)
            continue;
        CHECK(s <= t * 1000 && t * 1000 < e);
        CHECK(e - t * 1000 <= (int64_t)calendar_nominal_ms((enum calendar_unit)u) +
                              swing * 1000);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct calendar_zone z, pz;
    struct calendar_trans *tr = NULL;
    uint32_t n = 0;
    char why[256];
    int r;

    memset(&pz, 0, sizeof(pz));
    strcpy(pz.name, "F");
    if (tzif_posix_rule((const char *)data, size, &pz) == 0) {
        CHECK(calendar_check(&pz, 1, NULL, 0) == 0);
        periods(&pz, NULL, 1700000000);
        periods(&pz, NULL, 4100000000);
    }
    r = tzif_parse(data, size, &z, &tr, &n, why, sizeof(why));
    CHECK(r == 0 || r == -EINVAL || r == -ENOMEM);
    if (r == 0) {
        strcpy(z.name, "F");
        z.first = 0;
        z.n = n;
        CHECK(calendar_check(&z, 1, tr, n) == 0);
        for (size_t i = 0; i < 4 && size >= 8 * (i + 1); i++) {
            uint64_t v;

            memcpy(&v, data + size - 8 * (i + 1), 8);
            periods(&z, tr, (int64_t)(v % (uint64_t)(CALENDAR_T_MAX - CALENDAR_T_MIN)) +
                            CALENDAR_T_MIN);
        }
        periods(&z, tr, 0);
        periods(&z, tr, 1774785600);
    }
    free(tr);
    return 0;
}
