# SPDX-License-Identifier: MIT
# divvyd's RESP listener from redis-py (Debian's python3-redis,
# tests/integration/test_resp_clients.c): python3 redis_py_client.py SOCKET
# [PASSWORD].  With defaults (RESP2, pipeline() as a MULTI/EXEC transaction):
# DIVVY.HIT, RL.REDUCE, CL.THROTTLE, a transaction and a plain pipeline; with
# PASSWORD, also a wrong password (refused) and none (commands refused).
# Prints one line per check; exit 0 when all pass.
import sys

import redis

failed = False


def same(what, got, want):
    global failed
    if got != want:
        print(f"FAIL {what}: got {got!r}, want {want!r}")
        failed = True
    else:
        print(f"ok {what}")


def refused(what, fn, want):
    global failed
    try:
        fn()
        print(f"FAIL {what}: accepted")
        failed = True
    except redis.exceptions.RedisError as e:
        if want in str(e) or want in type(e).__name__:
            print(f"ok {what}")
        else:
            print(f"FAIL {what}: {type(e).__name__}: {e}")
            failed = True


path = sys.argv[1]
password = sys.argv[2] if len(sys.argv) > 2 else None
r = redis.Redis(unix_socket_path=path, password=password)
same("PING", r.ping(), True)
same("DIVVY.HIT", r.execute_command("DIVVY.HIT", "app", "py"), [1, 2, 60, b"r1"])
same("RL.REDUCE x3", [r.execute_command("RL.REDUCE", "pyTwoPerMin", "2", "60")
                      for _ in range(3)], [2, 1, 0])
same("CL.THROTTLE", r.execute_command("CL.THROTTLE", "py123", "15", "30", "60", "1"),
     [0, 16, 15, -1, 2])
p = r.pipeline()
p.execute_command("DIVVY.HIT", "app", "py")
p.execute_command("RL.REDUCE", "pyTwoPerMin", "2", "60")
p.ping()
same("pipeline() (MULTI/EXEC)", p.execute(), [[1, 1, 60, b"r1"], 0, True])
p = r.pipeline(transaction=False)
p.execute_command("DIVVY.HIT", "app", "py")
p.ping()
same("pipeline(transaction=False)", p.execute(), [[1, 0, 60, b"r1"], True])
if password:
    refused("wrong password", lambda: redis.Redis(unix_socket_path=path,
                                                  password="wrong").ping(), "WRONGPASS")
    refused("no password", lambda: redis.Redis(unix_socket_path=path).ping(),
            "Authentication required")
sys.exit(1 if failed else 0)
