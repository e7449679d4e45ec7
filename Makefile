# SPDX-License-Identifier: MIT
# divvy: one non-recursive Makefile.  `make help` lists the targets.

PREFIX    ?= /usr/local
BINDIR    ?= $(PREFIX)/bin
SBINDIR   ?= $(PREFIX)/sbin
# With PREFIX=/usr the library goes where Debian's multiarch layout puts it
# (/usr/lib/<triplet>); elsewhere $(PREFIX)/lib.
LIBDIR    ?= $(PREFIX)/lib$(if $(filter /usr,$(PREFIX)),$(addprefix /,$(MULTIARCH)))
INCLUDEDIR ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
SYSCONFDIR ?= /etc
B         ?= build
WERROR    ?= 1
CC        ?= cc
MULTIARCH := $(shell $(CC) -print-multiarch 2>/dev/null)
PKG_CONFIG ?= pkg-config

VERSION   := 0.1.0
SOVERSION := 0

# Dependencies of the daemon and of common/'s config loaders.
PKGS      := libconfig liburcu-memb libevent libevent_pthreads jansson hiredis libsystemd \
             libmicrohttpd libnghttp2 libprotobuf-c
TEST_PKGS := cmocka

# TLS listeners (daemon/tls.c, docs/security.md): OpenSSL's libssl and libcrypto.
PKGS      += openssl

WARN := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wformat=2 \
        -Wno-format-nonliteral
ifeq ($(WERROR),1)
WARN += -Werror
endif
ARCH_FLAGS := $(if $(filter x86_64,$(shell uname -m)),-mcx16,)
BASE_CFLAGS := -std=gnu11 -O2 -g -fPIC -fvisibility=hidden $(ARCH_FLAGS) $(WARN) -MMD -MP \
               -D_GNU_SOURCE -DDIVVY_VERSION='"$(VERSION)"' -I. -Icommon -Ilibclient -I$(B)/gen
SAN_FLAGS ?=
# Quiet by default: a build step prints one line ("  CC      build/common/hash.o")
# and its errors; V=1 prints every command, make -s nothing but errors.  Recipes
# start with $(call quiet,STEP) (which prints that line) or $(Q) (nothing).
V         ?= 0
Q          = $(if $(filter 1,$(V)),,@)
quiet      = $(if $(filter 1,$(V))$(findstring s,$(firstword -$(MAKEFLAGS))),,@printf '  %-7s %s\n' '$(1)' '$@';)

pc_cflags = $(shell $(PKG_CONFIG) --cflags $(1) 2>/dev/null)
pc_libs   = $(shell $(PKG_CONFIG) --libs $(1) 2>/dev/null)

ALL_CFLAGS  = $(BASE_CFLAGS) $(SAN_FLAGS) $(call pc_cflags,$(PKGS)) $(CPPFLAGS) $(CFLAGS)
ALL_LDFLAGS = $(SAN_FLAGS) $(LDFLAGS)
LIBS        = $(call pc_libs,$(PKGS)) -lpthread -lm

COMMON_SRCS := $(wildcard common/*.c)
SERVER_SRCS := $(wildcard server/*.c)
DAEMON_SRCS := $(wildcard daemon/*.c)
CLIENT_SRCS := $(wildcard libclient/*.c)
CTL_SRCS    := $(wildcard tools/divvyctl*.c)
PAM_SRCS    := $(wildcard pam/*.c)
EXAMPLE_SRCS := $(wildcard docs/examples/*.c)
UNIT_SRCS   := $(wildcard tests/unit/test_*.c)
ITEST_SRCS  := $(wildcard tests/integration/test_*.c)
ITEST_LIB   := $(filter-out $(ITEST_SRCS),$(wildcard tests/integration/*.c))

COMMON_OBJS := $(COMMON_SRCS:%.c=$(B)/%.o)
SERVER_OBJS := $(SERVER_SRCS:%.c=$(B)/%.o)
# The RLS listener's messages (daemon/rls_msg.c): C generated from proto/ by
# protoc-c at build time into $(B)/gen/ (docs/rls.md).
PROTO_SRCS  := $(shell find proto -name '*.proto' | sort)
PROTO_GEN_C := $(PROTO_SRCS:proto/%.proto=$(B)/gen/%.pb-c.c)
PROTO_GEN_H := $(PROTO_GEN_C:%.c=%.h)
PROTO_OBJS  := $(PROTO_GEN_C:%.c=%.o)
DAEMON_OBJS := $(DAEMON_SRCS:%.c=$(B)/%.o) $(PROTO_OBJS)
# Every daemon module but main.c, in an archive the daemon's tests link.
DAEMON_LIB_OBJS := $(filter-out $(B)/daemon/main.o,$(DAEMON_OBJS))
CLIENT_OBJS := $(CLIENT_SRCS:%.c=$(B)/%.o)
CTL_OBJS    := $(CTL_SRCS:%.c=$(B)/%.o)
PAM_OBJS    := $(PAM_SRCS:%.c=$(B)/%.o)
EXAMPLE_BINS := $(EXAMPLE_SRCS:docs/examples/%.c=$(B)/examples/%)
# common/ is what clients link (libdivvy, pam_divvy.so, divvy-bench): the
# compiled-rule loader and matcher, the table's CAS core, attach and leases,
# algorithms, codec, eval.  server/ is what only divvyd and divvyctl link:
# config loaders, rule validator and compiler, table creation, sweep, move
# and snapshots.  Only the code that links server/ sees its headers
# (SERVER_USERS); check-symbols proves no client carries its symbols.
LIBCOMMON   := $(B)/libdivvycommon.a
LIBSERVER   := $(B)/libdivvyserver.a
SERVER_USERS := server/% daemon/% tools/divvyctl% tools/dlog-gen% tests/%
server_inc   = $(if $(filter $(SERVER_USERS),$(1)),-Iserver)
UNIT_BINS   := $(UNIT_SRCS:tests/unit/%.c=$(B)/tests/%)
ITEST_BINS  := $(ITEST_SRCS:tests/integration/%.c=$(B)/tests/%)
ITEST_OBJS  := $(ITEST_LIB:%.c=$(B)/%.o)
ITEST_A     := $(B)/tests/libharness.a

DIVVYD      := $(B)/divvyd
BENCH       := $(B)/divvy-bench
DIVVYCTL    := $(B)/divvyctl
LIBDIVVYD   := $(B)/libdivvyd.a
LIBDIVVY_SO := $(B)/libdivvy.so.$(SOVERSION)
LIBDIVVY_A  := $(B)/libdivvy.a
LIBCLIENT_A := $(B)/libdivvyclient.a
PAM_SO      := $(B)/pam_divvy.so
PC_FILE     := $(B)/divvy.pc
# divvy.pc names PREFIX, LIBDIR and INCLUDEDIR: written once by the build and
# installed as it is, again only when one of them changes.  PC_STAMP holds
# their values; it is rewritten (so divvy.pc is out of date) when they differ.
PC_VARS     := $(PREFIX) $(LIBDIR) $(INCLUDEDIR) $(VERSION)
PC_STAMP    := $(B)/divvy.pc.vars
ifneq ($(file <$(PC_STAMP)),$(PC_VARS))
$(shell mkdir -p $(B))
$(file >$(PC_STAMP),$(PC_VARS))
endif
# divvyctl and divvy-bench find libdivvy next to them in build/ ($ORIGIN);
# install copies them as built and only deletes that run path (chrpath -d),
# so installed they load the installed libdivvy.  Test programs find it in
# build/ by its absolute path.
LINK_LIBDIVVY_BIN = -L$(B) -ldivvy -Wl,-rpath,'$$ORIGIN'
LINK_LIBDIVVY     = $(LINK_LIBDIVVY_BIN) -Wl,-rpath,$(abspath $(B))

.PHONY: all run check check-unit check-integration asan bench deps deps-build deps-check clean help \
        bench-instr bench-replay install cas-check fuzz build-tests clang tsan check-tsan valgrind coverage soak \
        check-systemd check-fleet deb
.DEFAULT_GOAL := all

CLIENT_TARGETS := $(LIBDIVVY_SO) $(B)/libdivvy.so $(LIBDIVVY_A) $(PC_FILE) $(DIVVYCTL) $(PAM_SO) \
                  $(EXAMPLE_BINS)

all: deps-check $(DIVVYD) $(BENCH) $(CLIENT_TARGETS) cas-check

help:
	@echo "make, make all  build divvyd, divvyctl, libdivvy, pam_divvy.so, divvy-bench and the"
	@echo "                examples into $(B)/: one line per step, V=1 prints every command"
	@echo "make run        install missing deps (root), build, run divvyd with etc/divvy.conf"
	@echo "                on tcp:127.0.0.1:8321 and $(B)/run/divvy.sock: RUN_LISTEN=\"ADDR ...\""
	@echo "                replaces them, RUN_LISTEN= keeps the config's; RUN_CONFIG=FILE"
	@echo "make check      install missing deps (root), build, run every test: gcc, valgrind,"
	@echo "                clang, ASan+UBSan, TSan, 10 s per fuzzer (docs/dev/testing.md)"
	@echo "make build-tests  build everything and every test binary; run nothing"
	@echo "make check-unit, make check-integration  one suite of this build (B=), built first"
	@echo "make check-symbols  no daemon-only symbol in libdivvy.so or pam_divvy.so (check-unit)"
	@echo "make check-docs every function has a man page, pages render, docs and completion"
	@echo "                install (check-unit)"
	@echo "make check-monitoring  promtool check and test the alert rules, the dashboard is JSON"
	@echo "                (check-unit); make install-monitoring, make uninstall-monitoring"
	@echo "                only them, into \$$DESTDIR\$$PREFIX/share/divvy/monitoring"
	@echo "make check-systemd  (root) install into a Debian bookworm container booted with"
	@echo "                systemd-nspawn and drive the units there (tests/systemd/check-systemd.sh)"
	@echo "make check-fleet  (root) three hosts and their Redis (single, Sentinel, Cluster) in"
	@echo "                network namespaces: exact counts under faults (tests/fleet/check-fleet.sh)"
	@echo "make asan       build into build-asan/ with ASan+UBSan and run the tests there"
	@echo "make clang      build into build-clang/ with clang and run the tests there"
	@echo "make tsan       unit tests under ThreadSanitizer (clang) in build-tsan/; make"
	@echo "                check-tsan runs them in this build"
	@echo "make valgrind   the PAM module's 10,000-login loop under valgrind memcheck"
	@echo "make fuzz       each libFuzzer harness for FUZZ_SECONDS (60)"
	@echo "make coverage   gcc --coverage build in build-cov/, tests, gcovr per directory"
	@echo "make soak DURATION=10m   mixed load with reloads and Redis restarts (tools/soak.sh)"
	@echo "make bench      run the divvy-bench matrix against a fresh divvyd"
	@echo "make bench-instr  instructions per decision on each path, with callgrind"
	@echo "                (tools/bench-instr.sh, docs/dev/benchmarks.md; a few minutes)"
	@echo "make bench-replay  divvyctl replay through a generated week of decision log"
	@echo "                (tools/bench-replay.sh; GBs kept in BENCH_REPLAY_DIR)"
	@echo "make bench-replay-clean  delete bench-replay's generated log"
	@echo "make install    install into \$$DESTDIR\$$PREFIX (docs/operations.md)"
	@echo "make uninstall  remove what install installed, except the config"
	@echo "make install-doc, make uninstall-doc  only the man pages, docs and completion"
	@echo "make deb        the Debian packages (debian/) into $(B)/deb/, built in a copy of the tree"
	@echo "make deps       install missing build and test dependencies (root; tools/deps.sh)"
	@echo "make deps-build install missing build dependencies (root)"
	@echo "make deps-check name the missing build dependencies (every build runs it)"
	@echo "make cas-check  16-byte CAS inline, never through libatomic (every build runs it)"
	@echo "make clean      remove build outputs"
	@echo "make help       this list"

deps:
	@tools/deps.sh install
deps-build:
	@tools/deps.sh install-build
deps-check:
	@tools/deps.sh check

$(B)/%.o: %.c Makefile
	@mkdir -p $(@D)
	$(call quiet,CC)$(CC) $(ALL_CFLAGS) $(call server_inc,$<) -c $< -o $@

# protoc-c (Debian's protobuf-c-compiler) writes each .proto's .pb-c.c/.h.
$(B)/gen/%.pb-c.c $(B)/gen/%.pb-c.h: proto/%.proto
	@mkdir -p $(B)/gen
	$(call quiet,PROTOC)protoc-c -Iproto --c_out=$(B)/gen $<
$(B)/gen/%.o: $(B)/gen/%.c Makefile
	$(call quiet,CC)$(CC) $(ALL_CFLAGS) -c $< -o $@
$(PROTO_OBJS) $(filter $(B)/daemon/rls%.o,$(DAEMON_OBJS)): $(PROTO_GEN_H)

$(LIBCOMMON): $(COMMON_OBJS)
	@mkdir -p $(@D)
	$(Q)rm -f $@
	$(call quiet,AR)$(AR) rcs $@ $^

$(LIBSERVER): $(SERVER_OBJS)
	@mkdir -p $(@D)
	$(Q)rm -f $@
	$(call quiet,AR)$(AR) rcs $@ $^

$(LIBDIVVYD): $(DAEMON_LIB_OBJS)
	@mkdir -p $(@D)
	$(Q)rm -f $@
	$(call quiet,AR)$(AR) rcs $@ $^

$(DIVVYD): $(B)/daemon/main.o $(LIBDIVVYD) $(LIBSERVER) $(LIBCOMMON)
	$(call quiet,LD)$(CC) $(ALL_LDFLAGS) -o $@ $(B)/daemon/main.o $(LIBDIVVYD) $(LIBSERVER) \
	    $(LIBCOMMON) $(LIBS)

$(BENCH): $(B)/tools/divvy-bench.o $(LIBCOMMON) $(LIBDIVVY_SO) $(B)/libdivvy.so
	$(call quiet,LD)$(CC) $(ALL_LDFLAGS) -o $@ $< $(LIBCOMMON) $(LINK_LIBDIVVY_BIN) $(LIBS)

# libdivvy: shared (only divvy_* exported: -fvisibility=hidden plus a version
# script) and static; divvy.pc from libclient/divvy.pc.in.
$(LIBDIVVY_SO): $(CLIENT_OBJS) $(COMMON_OBJS) libclient/divvy.map
	$(call quiet,LD)$(CC) $(ALL_LDFLAGS) -shared -Wl,-soname,libdivvy.so.$(SOVERSION) \
	    -Wl,--version-script=libclient/divvy.map -Wl,--no-undefined \
	    -o $@ $(CLIENT_OBJS) $(COMMON_OBJS) -lpthread
$(B)/libdivvy.so: $(LIBDIVVY_SO)
	$(call quiet,LN)ln -sf libdivvy.so.$(SOVERSION) $@
$(LIBDIVVY_A): $(CLIENT_OBJS) $(COMMON_OBJS)
	$(Q)rm -f $@
	$(call quiet,AR)$(AR) rcs $@ $^
$(LIBCLIENT_A): $(CLIENT_OBJS)
	@mkdir -p $(@D)
	$(Q)rm -f $@
	$(call quiet,AR)$(AR) rcs $@ $^
$(PC_FILE): libclient/divvy.pc.in $(PC_STAMP) Makefile
	$(call quiet,GEN)sed -e 's|@PREFIX@|$(PREFIX)|; s|@LIBDIR@|$(LIBDIR)|; s|@INCLUDEDIR@|$(INCLUDEDIR)|' \
	    -e 's|@VERSION@|$(VERSION)|' $< > $@

# No server/ symbol in libdivvy.so or pam_divvy.so (run by check-unit).
.PHONY: check-symbols
check-symbols: $(LIBSERVER) $(LIBCOMMON) $(LIBDIVVY_SO) $(PAM_SO)
	@tests/unit/client_symbols.sh $(LIBSERVER) $(LIBCOMMON) $(LIBDIVVY_SO) $(PAM_SO)
check-unit: check-symbols

# divvyctl: the public API through libdivvy.so; server/ and common/ only for
# check/convert.
$(DIVVYCTL): $(CTL_OBJS) $(LIBSERVER) $(LIBCOMMON) $(LIBDIVVY_SO) $(B)/libdivvy.so
	$(call quiet,LD)$(CC) $(ALL_LDFLAGS) -o $@ $(CTL_OBJS) $(LIBSERVER) $(LIBCOMMON) \
	    $(LINK_LIBDIVVY_BIN) $(LIBS)

# pam_divvy.so: libdivvy linked in statically (hidden), only pam_sm_* exported.
$(PAM_SO): $(PAM_OBJS) $(LIBDIVVY_A) pam/pam_divvy.map
	$(call quiet,LD)$(CC) $(ALL_LDFLAGS) -shared -Wl,--version-script=pam/pam_divvy.map -Wl,--no-undefined \
	    -o $@ $(PAM_OBJS) $(LIBDIVVY_A) -lpam -lpthread

# Example programs from docs/examples/, built against the public header only.
$(B)/examples/%: docs/examples/%.c $(LIBDIVVY_SO) $(B)/libdivvy.so
	@mkdir -p $(@D)
	$(call quiet,CCLD)$(CC) $(ALL_CFLAGS) $(ALL_LDFLAGS) -o $@ $< -L$(B) -ldivvy -Wl,-rpath,$(abspath $(B))

# The table's state word must be updated by an inline 16-byte CAS: a call into
# libatomic could take a lock that is private to one process (DESIGN §4).
cas-check: $(LIBCOMMON) $(LIBSERVER)
	@if nm $(LIBCOMMON) $(LIBSERVER) | grep -E \
	        ' U (__atomic_compare_exchange_16|__sync_val_compare_and_swap_16|__atomic_load_16)$$'; then \
	    echo "cas-check: common/ or server/ calls libatomic for 16-byte atomics" \
	        "(docs/dev/shm.md)" >&2; \
	    exit 1; fi

# Unit tests: one cmocka binary per module, linking the archives (daemon/ and
# libclient/ modules included); a test's fakes are -Wl,--wrap= flags in its
# TEST_WRAP (docs/dev/testing.md).
$(B)/tests/test_%: tests/unit/test_%.c $(LIBDIVVYD) $(LIBCLIENT_A) $(LIBSERVER) $(LIBCOMMON)
	@mkdir -p $(@D)
	$(call quiet,CCLD)$(CC) $(ALL_CFLAGS) -Iserver $(call pc_cflags,$(TEST_PKGS)) $(ALL_LDFLAGS) \
	    $(TEST_WRAP) -o $@ $< $(LIBDIVVYD) $(LIBCLIENT_A) $(LIBSERVER) $(LIBCOMMON) \
	    $(call pc_libs,$(TEST_PKGS)) $(LIBS) -lpam
# test_line_verb: the line protocol's verb table alone; the handlers of other modules and the
# replies are its fakes.
$(B)/tests/test_line_verb: TEST_WRAP := -Wl,--wrap=line_hit,--wrap=admin_explain \
    -Wl,--wrap=admin_rules,--wrap=admin_stats,--wrap=admin_reload,--wrap=admin_dropin \
    -Wl,--wrap=counters_request \
    -Wl,--wrap=line_err,--wrap=line_text
# test_memtrim: counts the trims instead of making them.
$(B)/tests/test_memtrim: TEST_WRAP := -Wl,--wrap=malloc_trim
# test_hit_batch: a fake store records the scripts hot-key coalescing sends.
$(B)/tests/test_hit_batch: TEST_WRAP := -Wl,--wrap=store_verdict,--wrap=store_verdicts

# Integration tests: real divvyd, real sockets (tests/integration/harness.c),
# libdivvy through its shared library, divvyctl and pam_divvy.so from build/.
# The harness modules (harness*.c) as an archive: a test links those it uses.
$(ITEST_A): $(ITEST_OBJS)
	@mkdir -p $(@D)
	$(Q)rm -f $@
	$(call quiet,AR)$(AR) rcs $@ $^
$(B)/tests/test_%: tests/integration/test_%.c $(ITEST_A) $(LIBDIVVYD) $(LIBSERVER) $(LIBCOMMON) \
                   $(DIVVYD) $(CLIENT_TARGETS)
	@mkdir -p $(@D)
	$(call quiet,CCLD)$(CC) $(ALL_CFLAGS) -Iserver -Itests/integration $(call pc_cflags,$(TEST_PKGS)) \
	    $(ALL_LDFLAGS) -o $@ $< $(ITEST_A) $(LIBDIVVYD) $(LIBSERVER) $(LIBCOMMON) $(LINK_LIBDIVVY) \
	    $(call pc_libs,$(TEST_PKGS)) $(LIBS) -lpam

# Every test binary runs even when an earlier one fails; one line each, its
# output only when it fails; skips counted with their reasons and the failures
# listed at the end (tests/run_tests.sh).  $(call run_tests,BINS,ENV).
run_tests = $(2) tests/run_tests.sh $(1)
ITEST_ENV = DIVVYD=$(abspath $(DIVVYD)) DIVVYCTL=$(abspath $(DIVVYCTL)) \
            PAM_DIVVY=$(abspath $(PAM_SO)) DIVVY_BUILD=$(abspath $(B))

check-unit: $(UNIT_BINS)
	@tests/check_layers.sh
	@tests/check_make.sh
	@$(call run_tests,$(UNIT_BINS),)

check-integration: $(ITEST_BINS) $(DIVVYD) $(CLIENT_TARGETS) $(BENCH)
	@$(call run_tests,$(ITEST_BINS),$(ITEST_ENV))

# ---- test matrix (docs/dev/testing.md) ----------------------------------------------
# Each configuration builds in its own directory with every CPU (unless the
# caller gave -j), then runs its tests one binary at a time.
CLANG   ?= clang
NPROC   := $(shell nproc 2>/dev/null || echo 2)
SUBMAKE  = $(MAKE) --no-print-directory
BUILD_J  = $(if $(filter -j%,$(MAKEFLAGS)),,-j$(NPROC))
# $(call suite,VARS): build and run the unit and integration suites with VARS.
suite    = $(SUBMAKE) $(BUILD_J) $(1) build-tests && $(SUBMAKE) $(1) check-unit && \
           $(SUBMAKE) $(1) check-integration
# $(call step,NAME,COMMAND): runs COMMAND, then says how long it took; stops on failure.
step     = t0=$$(date +%s); $(2) || { echo "make check: $(1) FAILED" >&2; exit 1; }; \
           echo "make check: $(1) passed in $$(( $$(date +%s) - t0 )) s"

build-tests: all $(UNIT_BINS) $(ITEST_BINS)

# `make check`: deps; gcc build and tests; the PAM module under valgrind; clang
# build and tests; ASan+UBSan; TSan; a short run of each fuzzer.
# The skips of every step, for the last line (tests/run_tests.sh).
check: export DIVVY_SKIP_LOG := $(CURDIR)/build/check-skips.txt
check: deps
	@mkdir -p build && : >$(DIVVY_SKIP_LOG)
	@$(call step,gcc,$(call suite,))
	@$(call step,valgrind,$(SUBMAKE) valgrind)
	@$(call step,clang,$(SUBMAKE) clang)
	@$(call step,asan,$(SUBMAKE) asan)
	@$(call step,tsan,$(SUBMAKE) tsan)
	@$(call step,fuzz,$(SUBMAKE) fuzz FUZZ_SECONDS=10)
	@git status --porcelain 2>/dev/null | grep -v '^??' >/dev/null && \
	    { echo "check: tests modified tracked files" >&2; git status --short >&2; exit 1; } || true
	@n=$$(wc -l <$(DIVVY_SKIP_LOG)); if [ "$$n" = 0 ]; then \
	    echo "make check: all tests passed, none skipped"; \
	else echo "make check: all tests passed, $$n skipped:"; sed 's/^/  /' $(DIVVY_SKIP_LOG); fi

# `make check-systemd`: `make install` into a Debian bookworm root (mmdebstrap,
# cached under /var/cache/divvy-check-systemd/), booted with systemd-nspawn;
# the units driven with systemctl and divvyctl there (docs/dev/testing.md).  Root.
check-systemd: deps
	@$(SUBMAKE) $(BUILD_J) all $(SYSD_ATTACK)
	@tests/systemd/check-systemd.sh $(B)

# Run inside the container against the installed libdivvy: no rpath into $(B).
SYSD_ATTACK := $(B)/tests/systemd/fast_attack
$(SYSD_ATTACK): tests/systemd/fast_attack.c $(B)/libdivvy.so
	@mkdir -p $(@D)
	$(call quiet,CCLD)$(CC) $(BASE_CFLAGS) $(SAN_FLAGS) $(CPPFLAGS) $(CFLAGS) $(ALL_LDFLAGS) -o $@ $< -L$(B) -ldivvy

# `make check-fleet`: three hosts, each its own divvyd, and their Redis (one,
# Sentinel, a 3-master Cluster) in network namespaces the script creates;
# faults, exact counts, lease bounds, pam_divvy across hosts
# (tests/fleet/check-fleet.sh, docs/dev/testing.md).  Root; SKIP without netns.
FLEET_BINS := $(B)/tests/fleet/delay_proxy $(B)/tests/fleet/fleet_hit
check-fleet: deps
	@$(SUBMAKE) $(BUILD_J) all $(FLEET_BINS)
	@tests/fleet/check-fleet.sh $(B)

$(B)/tests/fleet/delay_proxy: tests/fleet/delay_proxy.c
	@mkdir -p $(@D)
	$(call quiet,CCLD)$(CC) $(BASE_CFLAGS) $(SAN_FLAGS) $(CPPFLAGS) $(CFLAGS) $(ALL_LDFLAGS) -o $@ $<
$(B)/tests/fleet/fleet_hit: tests/fleet/fleet_hit.c $(LIBCOMMON) $(B)/libdivvy.so
	@mkdir -p $(@D)
	$(call quiet,CCLD)$(CC) $(BASE_CFLAGS) $(SAN_FLAGS) $(CPPFLAGS) $(CFLAGS) $(ALL_LDFLAGS) -o $@ $< \
	    $(LIBCOMMON) $(LINK_LIBDIVVY) -lpthread

ASAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
asan:
	@$(call suite,B=build-asan SAN_FLAGS="$(ASAN_FLAGS)")

clang:
	@$(call suite,CC=$(CLANG) B=build-clang)

# ThreadSanitizer (clang) over every unit test: none of them uses liburcu, whose
# barriers TSan cannot see (daemon/main.c, reload.c, srv.c, admin.c and line_verb.c are the RCU code;
# the integration suites run that daemon and are left out).  test_table skips
# its cross-process cases itself: TSan emulates 16-byte atomics with a lock
# private to each process.  TSAN_EXCLUDE names unit tests to leave out.
TSAN_FLAGS   := -fsanitize=thread -fno-omit-frame-pointer
TSAN_EXCLUDE ?=
TSAN_BINS     = $(filter-out $(TSAN_EXCLUDE:%=$(B)/tests/%),$(UNIT_BINS))
tsan:
	@$(SUBMAKE) $(BUILD_J) CC=$(CLANG) B=build-tsan SAN_FLAGS="$(TSAN_FLAGS)" check-tsan
check-tsan: $(TSAN_BINS)
	@$(call run_tests,$(TSAN_BINS),TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 $${TSAN_OPTIONS:-}")

# valgrind memcheck over test_pam's 10,000 logins in one process (the PAM
# module, libdivvy inside it, libpam); divvyd itself runs outside valgrind.
VALGRIND_FLAGS := -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite,possible \
                  --show-leak-kinds=definite,possible --num-callers=30
valgrind:
	@command -v valgrind >/dev/null || { echo "valgrind: missing; apt-get install valgrind" >&2; exit 1; }
	@$(SUBMAKE) $(BUILD_J) all $(B)/tests/test_pam
	@echo "== valgrind $(B)/tests/test_pam (test_pam_many_calls_no_leak)"
	@$(ITEST_ENV) DIVVY_TEST_FILTER='test_pam_many_calls_no_leak' \
	    valgrind $(VALGRIND_FLAGS) $(B)/tests/test_pam
	@echo "valgrind: no errors, no leaks"

# Coverage: gcc --coverage -O0 in build-cov/ (atomic counters: the table and
# the daemon are multi-threaded), the unit and integration suites, then line
# and branch coverage per directory (gcovr); per file in build-cov/coverage.txt,
# everything in build-cov/coverage.json.  A failed test fails the target, after
# the numbers are printed.
COV_DIRS  := common server daemon libclient pam tools
COV_VARS  := B=build-cov SAN_FLAGS="--coverage -O0 -fprofile-update=atomic"
coverage:
	@command -v gcovr >/dev/null || { echo "coverage: gcovr missing; apt-get install gcovr" >&2; exit 1; }
	@find build-cov -name '*.gcda' -delete 2>/dev/null || true
	@$(SUBMAKE) $(BUILD_J) $(COV_VARS) build-tests
	@rc=0; $(SUBMAKE) $(COV_VARS) check-unit || rc=1; \
	    $(SUBMAKE) $(COV_VARS) check-integration || rc=1; \
	    gcovr -r . --object-directory build-cov --exclude-unreachable-branches -j $(NPROC) \
	        $(foreach d,$(COV_DIRS),-f '$(d)/') --json build-cov/coverage.json || exit 1; \
	    gcovr -a build-cov/coverage.json -b -o build-cov/coverage-branches.txt || exit 1; \
	    gcovr -a build-cov/coverage.json -o build-cov/coverage.txt || exit 1; \
	    printf '%-11s %7s %13s %9s %13s\n' directory lines "" branches ""; \
	    for d in $(COV_DIRS) ''; do \
	        gcovr -a build-cov/coverage.json $${d:+-f "$$d/"} --print-summary -o /dev/null | \
	        awk -v d="$${d:-all}" '/^lines:/ { l = $$2; ln = $$3 "/" $$6 } \
	            /^branches:/ { b = $$2; bn = $$3 "/" $$6 } \
	            END { gsub(/[()]/, "", ln); gsub(/[()]/, "", bn); \
	                  printf "%-11s %7s %13s %9s %13s\n", d "/", l, ln, b, bn }' || exit 1; \
	    done; \
	    echo "per file: build-cov/coverage.txt (lines), build-cov/coverage-branches.txt"; exit $$rc

# Soak (not part of check): tools/soak.sh DURATION (e.g. 10m, 90s) of mixed
# load against divvyd with reloads and Redis restarts; one line per minute.
DURATION ?= 10m
$(B)/divvy-soak: tools/soak.c $(LIBDIVVY_SO) $(B)/libdivvy.so
	$(call quiet,CCLD)$(CC) $(ALL_CFLAGS) $(ALL_LDFLAGS) -o $@ $< -L$(B) -ldivvy -Wl,-rpath,$(abspath $(B)) -lpthread
soak: deps
	@$(SUBMAKE) $(BUILD_J) all $(B)/divvy-soak
	tools/soak.sh $(B) $(DURATION)

# Fuzzing: libFuzzer harnesses (clang), each run FUZZ_SECONDS on a temporary
# copy of its committed seed corpus (tests/fuzz/corpus/<name>/).  The archives
# (libdivvycommon.a, libdivvyserver.a, libdivvyd.a, libdivvyclient.a) are built
# in build-fuzz/ by this Makefile's own rules with clang and the fuzzer's
# instrumentation (FUZZ_SAN), and each harness links against them, taking the
# modules it reaches.  fuzz_segment links all of libclient/ (its calls into
# libdivvy are weak: an archive would not resolve them); fuzz_redis_reply sends
# log.c's calls to a sink through -Wl,--wrap (tests/fuzz/fuzz_redis_reply.c).
FUZZ_SECONDS ?= 60
FUZZ_B    := build-fuzz
FUZZ_SAN  := -O1 -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all
FUZZ_SRCS := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BINS := $(FUZZ_SRCS:tests/fuzz/%.c=$(FUZZ_B)/%)
FUZZ_CLIENT = $(LIBCLIENT_A)
FUZZ_WRAP   =
$(B)/fuzz_segment: FUZZ_CLIENT = -Wl,--whole-archive $(LIBCLIENT_A) -Wl,--no-whole-archive
$(B)/fuzz_redis_reply: FUZZ_WRAP = -Wl,--wrap=log_msg,--wrap=log_ratelimited

# Only with B=$(FUZZ_B) and SAN_FLAGS=$(FUZZ_SAN), as `make fuzz` runs it.
$(B)/fuzz_%: tests/fuzz/fuzz_%.c $(wildcard tests/fuzz/*.h) $(PROTO_GEN_H) \
             $(LIBDIVVYD) $(LIBCLIENT_A) $(LIBSERVER) $(LIBCOMMON)
	$(call quiet,CCLD)$(CC) $(ALL_CFLAGS) -Iserver -Idaemon -fsanitize=fuzzer $(ALL_LDFLAGS) \
	    $(FUZZ_WRAP) -o $@ $< $(LIBDIVVYD) $(FUZZ_CLIENT) $(LIBSERVER) $(LIBCOMMON) $(LIBS)

fuzz:
	+@$(SUBMAKE) $(BUILD_J) CC=$(CLANG) B=$(FUZZ_B) SAN_FLAGS="$(FUZZ_SAN)" $(FUZZ_BINS)
	@set -e; for f in $(FUZZ_BINS); do n=$${f#$(FUZZ_B)/fuzz_}; \
	    tmp=$$(mktemp -d); mkdir $$tmp/corpus; \
	    cp -r tests/fuzz/corpus/$$n/. $$tmp/corpus/; \
	    if $$f -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 -artifact_prefix=$$tmp/ \
	            $$tmp/corpus >$$tmp/log 2>&1; then \
	        echo "fuzz $$n: $(FUZZ_SECONDS) s, $$(sed -n 's/stat::number_of_executed_units: *//p' $$tmp/log) runs, no crash"; \
	        rm -rf $$tmp; \
	    else tail -40 $$tmp/log >&2; echo "fuzz $$n: FAILED; input and log in $$tmp" >&2; exit 1; fi; \
	done

# make run: divvyd in the foreground on RUN_CONFIG, listening on RUN_LISTEN,
# which replaces the config's server.listen (divvyd logs the addresses it
# leaves out); RUN_LISTEN= (empty) keeps the config's own listeners.
RUN_CONFIG ?= etc/divvy.conf
RUN_LISTEN ?= tcp:127.0.0.1:8321 unix:$(B)/run/divvy.sock
run: deps-build
	@$(MAKE) --no-print-directory all
	@mkdir -p $(B)/run
	$(DIVVYD) --config $(RUN_CONFIG) --state-dir $(B)/run $(RUN_LISTEN:%=--listen %)

bench: deps
	@$(MAKE) --no-print-directory all $(B)/bench_rules $(B)/divvy-rls-bench
	@echo "== rule matching: ns per request for 10 .. 100,000 rules (tests/unit/bench_rules.c)"
	$(B)/bench_rules
	tools/bench.sh $(B)

# The instruction budget (docs/dev/benchmarks.md): callgrind counts per decision
# on each path, with the no-work reference server and the fast-path driver,
# both built only here.
bench-instr:
	@$(MAKE) --no-print-directory all $(B)/divvy-rls-bench $(B)/bench-noop $(B)/bench-instr-fast
	tools/bench-instr.sh $(B)
$(B)/bench-noop: $(B)/tools/bench-noop.o
	$(call quiet,LD)$(CC) $(ALL_LDFLAGS) -o $@ $< -lpthread
$(B)/bench-instr-fast: tools/bench-instr-fast.c $(LIBDIVVY_SO) $(B)/libdivvy.so
	$(call quiet,CCLD)$(CC) $(ALL_CFLAGS) $(ALL_LDFLAGS) -o $@ $< -L$(B) -ldivvy \
	    -Wl,-rpath,$(abspath $(B))

# The RLS rows' load (tools/divvy-rls-bench.c): HTTP/2 calls, libnghttp2, and
# OpenSSL for its TLS mode (-s).
$(B)/divvy-rls-bench: $(B)/tools/divvy-rls-bench.o
	$(call quiet,LD)$(CC) $(ALL_LDFLAGS) -o $@ $< $(call pc_libs,libnghttp2 openssl)

# The replay benchmark (docs/dev/benchmarks.md "Replay"): dlog-gen writes a
# week of synthetic decision log at 1,000 decisions/s (GBs: into
# BENCH_REPLAY_DIR, default $(B)/bench-replay, once; SECONDS= for less), then
# divvyctl replay runs through it, timed.  `make bench-replay-clean` deletes it.
BENCH_REPLAY_DIR ?= $(B)/bench-replay
BENCH_REPLAY_SECONDS ?= 604800
.PHONY: bench-replay bench-replay-clean
bench-replay: $(DIVVYCTL) $(B)/dlog-gen
	tools/bench-replay.sh $(B) $(BENCH_REPLAY_DIR) $(BENCH_REPLAY_SECONDS)
bench-replay-clean:
	rm -rf $(BENCH_REPLAY_DIR)
$(B)/dlog-gen: $(B)/tools/dlog-gen.o $(LIBSERVER) $(LIBCOMMON)
	$(call quiet,LD)$(CC) $(ALL_LDFLAGS) -o $@ $< $(LIBSERVER) $(LIBCOMMON) $(LIBS)

$(B)/bench_rules: tests/unit/bench_rules.c $(LIBSERVER) $(LIBCOMMON)
	$(call quiet,CCLD)$(CC) $(ALL_CFLAGS) -Iserver $(ALL_LDFLAGS) -o $@ $< $(LIBSERVER) $(LIBCOMMON) \
	    $(LIBS)

# ---- install (docs/operations.md) ---------------------------------------------
# With PREFIX=/usr the places Debian uses (multiarch: libdivvy in
# /usr/lib/<triplet>, pam_divvy.so in /usr/lib/<triplet>/security; bookworm's
# systemd.pc names /lib/systemd/system for units); otherwise places under
# $(PREFIX) that systemd also searches.  Every directory can be set on the
# command line, e.g. PAMDIR=... or LIBDIR=....  divvy-bench is a benchmark, not
# a command for users' PATH: it goes to LIBEXECDIR/divvy (/usr/libexec/divvy).
MANDIR      ?= $(PREFIX)/share/man
LIBEXECDIR  ?= $(PREFIX)/libexec
DOCDIR      ?= $(PREFIX)/share/doc/divvy
INSTALL     ?= install
systemd_dir  = $(or $(shell $(PKG_CONFIG) --variable=$(1) systemd 2>/dev/null),$(2))
ifeq ($(PREFIX),/usr)
UNITDIR     ?= $(call systemd_dir,systemdsystemunitdir,/lib/systemd/system)
SYSUSERSDIR ?= $(call systemd_dir,sysusersdir,/usr/lib/sysusers.d)
TMPFILESDIR ?= $(call systemd_dir,tmpfilesdir,/usr/lib/tmpfiles.d)
PAMDIR      ?= $(LIBDIR)/security
else
UNITDIR     ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR ?= $(PREFIX)/lib/sysusers.d
TMPFILESDIR ?= $(PREFIX)/lib/tmpfiles.d
PAMDIR      ?= $(LIBDIR)/security
endif
MAN_PAGES   := $(wildcard docs/man/*.[1-8])
# run-divvy.mount is an example, never in UNITDIR: there divvyd.socket's implicit
# RequiresMountsFor=/run/divvy would pull it in (docs/operations.md "Huge pages").
EXAMPLE_FILES := $(wildcard etc/divvy.ini etc/divvy.json etc/pam.d/* docs/examples/*.c \
                 systemd/run-divvy.mount)
# The units name /usr/sbin, /usr/bin and /etc; rewritten to this layout.
UNIT_SED    := -e 's|/usr/sbin/divvyd|$(SBINDIR)/divvyd|g' \
               -e 's|/usr/bin/divvyctl|$(BINDIR)/divvyctl|g' -e 's|/etc/divvy/|$(SYSCONFDIR)/divvy/|g'

# The documentation (`make install-doc`, part of install): man pages, one
# link per public function of divvy.h to libdivvy(3), README.md, LICENSE,
# NEWS, docs/*.md and docs/dev/*.md under DOCDIR, bash completion.  Pages name the guides
# as /usr/share/doc/divvy/..., rewritten to DOCDIR.  tests/check_docs.sh
# (check-unit) installs this and checks it.
COMPLETIONSDIR ?= $(PREFIX)/share/bash-completion/completions
# Every exported function without a page of its own links to libdivvy(3).
DIVVY_EXPORTS := ${shell sed -n 's/^DIVVY_EXPORT [^(]*[ *]\(divvy_[a-z_]*\)(.*/\1/p' \
                   libclient/divvy.h}
MAN3_OWN    := $(basename $(notdir $(wildcard docs/man/divvy_*.3)))
MAN3_LINKS  := $(filter-out $(MAN3_OWN),$(DIVVY_EXPORTS))
DOC_FILES   := README.md LICENSE NEWS
COMPLETIONS := $(wildcard tools/bash-completion/*)
.PHONY: install-doc uninstall-doc
install: install-doc
install-doc:
	$(INSTALL) -d $(DESTDIR)$(DOCDIR)/docs $(DESTDIR)$(COMPLETIONSDIR)
	@set -e; for p in $(MAN_PAGES); do s=$${p##*.}; d=$(DESTDIR)$(MANDIR)/man$$s; \
	    echo "install $$p $$d/"; $(INSTALL) -d $$d; \
	    sed 's|/usr/share/doc/divvy|$(DOCDIR)|g' $$p > $$d/$${p##*/}; chmod 0644 $$d/$${p##*/}; done
	@set -e; for f in $(MAN3_LINKS); do echo "ln -sf libdivvy.3 $(DESTDIR)$(MANDIR)/man3/$$f.3"; \
	    ln -sf libdivvy.3 $(DESTDIR)$(MANDIR)/man3/$$f.3; done
	$(INSTALL) -m 0644 $(DOC_FILES) $(DESTDIR)$(DOCDIR)/
	$(INSTALL) -m 0644 $(wildcard docs/*.md) $(DESTDIR)$(DOCDIR)/docs/
	$(INSTALL) -d $(DESTDIR)$(DOCDIR)/docs/dev
	$(INSTALL) -m 0644 $(wildcard docs/dev/*.md) $(DESTDIR)$(DOCDIR)/docs/dev/
	$(INSTALL) -m 0644 $(COMPLETIONS) $(DESTDIR)$(COMPLETIONSDIR)/
# check-docs (run by check-unit): tests/check_docs.sh installs the above into
# a temporary DESTDIR and checks it; tests/check_completion.sh the completion.
.PHONY: check-docs
check-unit: check-docs
check-docs: $(DIVVYD) $(DIVVYCTL) $(LIBDIVVY_SO)
	@MAKE='$(MAKE)' tests/check_docs.sh $(B)
	@tests/check_completion.sh $(B)
uninstall: uninstall-doc
uninstall-doc:
	rm -f $(foreach p,$(MAN_PAGES),$(DESTDIR)$(MANDIR)/man$(subst .,,$(suffix $(p)))/$(notdir $(p))) \
	    $(MAN3_LINKS:%=$(DESTDIR)$(MANDIR)/man3/%.3) \
	    $(COMPLETIONS:tools/bash-completion/%=$(DESTDIR)$(COMPLETIONSDIR)/%)
	rm -rf $(DESTDIR)$(DOCDIR)

# The Grafana dashboard and Prometheus alert rules (docs/operations.md
# "Monitoring: dashboard and alerts"): check-monitoring (run by check-unit)
# has promtool check and unit-test the rules and python3 parse the dashboard;
# test_metrics_lint checks that every metric they query is exported.
MONITORING_DIR   ?= $(PREFIX)/share/divvy/monitoring
MONITORING_FILES := etc/monitoring/divvy-alerts.yml etc/monitoring/divvy-alerts.test.yml \
                    etc/monitoring/grafana-divvy.json
.PHONY: check-monitoring install-monitoring uninstall-monitoring
check-unit: check-monitoring
check-monitoring:
	@cd etc/monitoring && out=$$( { promtool check rules divvy-alerts.yml && \
	    promtool test rules divvy-alerts.test.yml && \
	    python3 -m json.tool grafana-divvy.json >/dev/null; } 2>&1 ) && \
	    echo "check-monitoring: alert rules checked and tested by promtool, dashboard is JSON" || \
	    { echo "$$out" >&2; echo "check-monitoring: FAILED" >&2; exit 1; }
install: install-monitoring
install-monitoring:
	$(INSTALL) -d $(DESTDIR)$(MONITORING_DIR)
	$(INSTALL) -m 0644 $(MONITORING_FILES) $(DESTDIR)$(MONITORING_DIR)/
uninstall: uninstall-monitoring
uninstall-monitoring:
	rm -f $(MONITORING_FILES:etc/monitoring/%=$(DESTDIR)$(MONITORING_DIR)/%)
	-rmdir $(DESTDIR)$(MONITORING_DIR) $(DESTDIR)$(PREFIX)/share/divvy 2>/dev/null

.PHONY: uninstall
install: all
	$(INSTALL) -d $(DESTDIR)$(SBINDIR) $(DESTDIR)$(BINDIR) $(DESTDIR)$(SYSCONFDIR)/divvy \
	    $(DESTDIR)$(UNITDIR) $(DESTDIR)$(SYSUSERSDIR) $(DESTDIR)$(TMPFILESDIR) $(DESTDIR)$(DOCDIR)
	$(INSTALL) -m 0755 $(DIVVYD) $(DESTDIR)$(SBINDIR)/divvyd
	$(INSTALL) -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(PKGCONFIGDIR)
	$(INSTALL) -m 0644 $(LIBDIVVY_SO) $(DESTDIR)$(LIBDIR)/libdivvy.so.$(VERSION)
	ln -sf libdivvy.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libdivvy.so.$(SOVERSION)
	ln -sf libdivvy.so.$(SOVERSION) $(DESTDIR)$(LIBDIR)/libdivvy.so
	$(INSTALL) -m 0644 $(LIBDIVVY_A) $(DESTDIR)$(LIBDIR)/libdivvy.a
	$(INSTALL) -m 0644 libclient/divvy.h $(DESTDIR)$(INCLUDEDIR)/divvy.h
	$(INSTALL) -m 0644 $(PC_FILE) $(DESTDIR)$(PKGCONFIGDIR)/divvy.pc
	@# The binaries the tests ran, not relinked: only build/'s run path goes.
	$(INSTALL) -d $(DESTDIR)$(LIBEXECDIR)/divvy
	$(INSTALL) -m 0755 $(DIVVYCTL) $(DESTDIR)$(BINDIR)/divvyctl
	$(INSTALL) -m 0755 $(BENCH) $(DESTDIR)$(LIBEXECDIR)/divvy/divvy-bench
	chrpath -d $(DESTDIR)$(BINDIR)/divvyctl $(DESTDIR)$(LIBEXECDIR)/divvy/divvy-bench
	$(INSTALL) -d $(DESTDIR)$(PAMDIR)
	$(INSTALL) -m 0644 $(PAM_SO) $(DESTDIR)$(PAMDIR)/pam_divvy.so
	sed $(UNIT_SED) systemd/divvyd.service > $(DESTDIR)$(UNITDIR)/divvyd.service
	sed $(UNIT_SED) systemd/divvyd.socket > $(DESTDIR)$(UNITDIR)/divvyd.socket
	chmod 0644 $(DESTDIR)$(UNITDIR)/divvyd.service $(DESTDIR)$(UNITDIR)/divvyd.socket
	$(INSTALL) -m 0644 systemd/divvy.sysusers $(DESTDIR)$(SYSUSERSDIR)/divvy.conf
	$(INSTALL) -m 0644 systemd/divvy.tmpfiles $(DESTDIR)$(TMPFILESDIR)/divvy.conf
	@# An existing config is the admin's: never overwritten.
	test -e $(DESTDIR)$(SYSCONFDIR)/divvy/divvy.conf || \
	    $(INSTALL) -m 0644 etc/divvy.conf $(DESTDIR)$(SYSCONFDIR)/divvy/divvy.conf
	$(INSTALL) -d $(DESTDIR)$(DOCDIR)/examples
	$(INSTALL) -m 0644 $(EXAMPLE_FILES) $(DESTDIR)$(DOCDIR)/examples/

# Removes what install put there, except the config (the admin's); also
# UNITDIR/run-divvy.mount and BINDIR/divvy-bench, where earlier versions
# installed them.
uninstall:
	rm -f $(DESTDIR)$(SBINDIR)/divvyd $(DESTDIR)$(BINDIR)/divvyctl $(DESTDIR)$(BINDIR)/divvy-bench \
	    $(DESTDIR)$(LIBEXECDIR)/divvy/divvy-bench \
	    $(DESTDIR)$(LIBDIR)/libdivvy.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libdivvy.so.$(SOVERSION) \
	    $(DESTDIR)$(LIBDIR)/libdivvy.so $(DESTDIR)$(LIBDIR)/libdivvy.a \
	    $(DESTDIR)$(INCLUDEDIR)/divvy.h $(DESTDIR)$(PKGCONFIGDIR)/divvy.pc \
	    $(DESTDIR)$(PAMDIR)/pam_divvy.so $(DESTDIR)$(UNITDIR)/divvyd.service \
	    $(DESTDIR)$(UNITDIR)/divvyd.socket $(DESTDIR)$(UNITDIR)/run-divvy.mount \
	    $(DESTDIR)$(SYSUSERSDIR)/divvy.conf \
	    $(DESTDIR)$(TMPFILESDIR)/divvy.conf
	rm -rf $(DESTDIR)$(DOCDIR)
	-rmdir $(DESTDIR)$(LIBEXECDIR)/divvy 2>/dev/null
	@echo "uninstall: kept $(DESTDIR)$(SYSCONFDIR)/divvy/divvy.conf"

# ---- Debian packages (docs/operations.md "Debian packages") -------------------
# dpkg-buildpackage -b in a copy of the tree under $(B)/deb/src, so the tree
# stays clean and the .debs land in $(B)/deb/ (not in the tree's parent).  The
# copy builds with its own build/; MAKEFLAGS is cleared so this make's
# command-line B= (or any other variable) does not leak into that build.
DEB_DIR := $(B)/deb
deb:
	rm -rf $(DEB_DIR) && mkdir -p $(DEB_DIR)/src
	tar -cf - --exclude=./.git --exclude='./build*' --exclude='./$(patsubst ./%,%,$(B))' . | \
	    tar -C $(DEB_DIR)/src -xf -
	cd $(DEB_DIR)/src && env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL \
	    DEB_BUILD_OPTIONS="$${DEB_BUILD_OPTIONS:-parallel=$(NPROC)}" dpkg-buildpackage -b -us -uc
	@ls $(DEB_DIR)/*.deb

clean:
	rm -rf build build-asan build-clang build-tsan build-cov $(FUZZ_B)

-include $(shell find $(B) -path $(B)/deb -prune -o -name '*.d' -type f -print 2>/dev/null)
