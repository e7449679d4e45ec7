/* SPDX-License-Identifier: MIT */
/*
 * The login rules test_pam_lockout.c and test_sshd.c run divvyd on (docs/rules.md "Lockout"):
 * made-up names (known=no) lock their source after 3 failures for 600 s; 3 failures per user
 * and source lock for UNLOCK seconds, each further lock FACTOR times longer, and from the 1st
 * failure each attempt first waits DELAY seconds; 100 failures per source; the default rule.
 * Arguments are integer literals.
 */
#ifndef DIVVY_TEST_LOCKOUT_RULES_H
#define DIVVY_TEST_LOCKOUT_RULES_H

#define LOCKOUT_STR_(x) #x
#define LOCKOUT_STR(x) LOCKOUT_STR_(x)

#define LOCKOUT_RULES(UNLOCK, FACTOR, DELAY)                                                  \
    "rules = (\n"                                                                             \
    "{ match = { event = \"authfail\"; known = \"no\"; rhost = \"*\"; };\n"                   \
    "  label = \"login-unknown\"; actor = \"rhost\"; algorithm = \"lockout\";\n"              \
    "  credit_limit = 3; fail_interval = 900; unlock_time = 600;\n"                           \
    "  match_policy = \"continue\"; source = \"privileged\"; },\n"                            \
    "{ match = { event = \"authfail\"; user = \"*\"; rhost = \"*\"; };\n"                     \
    "  label = \"login-user-source\"; actor = [ \"user\", \"rhost\" ];\n"                     \
    "  algorithm = \"lockout\"; credit_limit = 3; fail_interval = 900;\n"                     \
    "  unlock_time = " LOCKOUT_STR(UNLOCK) ";\n"                                               \
    "  escalation = { factor = " LOCKOUT_STR(FACTOR) "; max = 3600; remember = 3600; };\n"     \
    "  delay = { after = 1; seconds = " LOCKOUT_STR(DELAY) "; factor = 1; max = "             \
    LOCKOUT_STR(DELAY) "; };\n"                                                               \
    "  match_policy = \"continue\"; source = \"privileged\"; },\n"                            \
    "{ match = { event = \"authfail\"; rhost = \"*\"; };\n"                                   \
    "  label = \"login-source\"; actor = \"rhost\"; credit_limit = 100; reset_seconds = 900;\n" \
    "  source = \"privileged\"; },\n"                                                         \
    "{ default = true; credit_limit = 100; reset_seconds = 60; }\n"                           \
    ");\n"

#endif
