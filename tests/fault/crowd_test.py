#!/usr/bin/env python3
"""Idle is not dead, at the scale of a storage service's clients: 500 client engines (10
processes of 50, over UCX shared memory) connect to one server, each makes 5 calls, then half of
them sit idle (answering the server's heartbeats only) while the other half make a call every
100 ms and one busy client calls beside them, for longer than SLUICE_PEER_TIMEOUT; then every
engine makes 5 calls again. Every client stays connected and every call is answered
(`sluice-perf -t crowd --idle-calls`); then all 500 close at once, each keeping its link
until the server has answered its goodbye, so that the server counts none of those orderly
closes as a failure."""
import os
import re
import subprocess
import time
import unittest

BUILD = os.environ.get("TEST_BUILD_DIR", os.path.join(os.path.dirname(__file__), "../../build"))
PERF = os.path.join(BUILD, "perf/sluice-perf")
PEERS, PER_PROCESS, CALLS, SECONDS = 500, 50, 5, 4
# The idle phase is the server's idle CPU measurement and the busy client's run among the idle
# ones, SECONDS each: more than twice the peer timeout.
ENV = dict(os.environ, SLUICE_PEER_TIMEOUT="3s")


class CrowdOfClients(unittest.TestCase):
    def test_500_client_engines_half_idle_stay_connected_and_every_call_is_answered(self):
        t0 = time.monotonic()
        r = subprocess.run([PERF, "-t", "crowd", "--peers", str(PEERS), "--per-process", str(PER_PROCESS), "--busy",
                            "1", "--seconds", str(SECONDS), "-r", "1", "--idle-calls", str(CALLS)], env=ENV,
                           capture_output=True, text=True, timeout=400)
        took = time.monotonic() - t0
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        note = [line for line in r.stdout.splitlines() if line.startswith("crowd ")]
        self.assertEqual(len(note), 1, r.stdout)
        note = note[0]
        print("%.0f s: %s" % (took, note[note.index("1 busy among"):]))
        # What the processes logged, each reason once with its count (addresses and pids left out).
        reasons = {}
        for line in r.stderr.splitlines():
            line = re.sub(r"127\.0\.0\.1:\d+|sluice\[[\d:]+\]|\d+ms", "*", line)
            reasons[line] = reasons.get(line, 0) + 1
        note += "\nlogged:\n" + "\n".join("%5d %s" % (n, line[:300]) for line, n in sorted(reasons.items()))
        connects = re.search(r"(\d+) connects in ([\d.]+) s \(slowest ([\d.]+) s, (\d+) failed\)", note)
        self.assertEqual((int(connects[1]), int(connects[4])), (PEERS, 0), note)
        alive = re.search(r"(\d+) of (\d+) idle still alive; (\d+) failed calls", note)
        self.assertEqual(int(alive[1]), PEERS, "no idle client was failed for silence: " + note)
        self.assertEqual(int(alive[3]), 0, "the busy client's calls were all answered: " + note)
        # The idle clients close in order, all at once. A client keeps its link until the server
        # has answered its BYE, so the server fails none of them, but for a client that gave up
        # first and said so: one that found the server silent (the busy one, idle meanwhile,
        # may, while hundreds of engines close on 2 cores), or one whose close reached its
        # deadline before the answer (the closes' teardown can starve the server of CPU).
        def count(pattern):
            return sum(n for line, n in reasons.items() if re.search(pattern, line))
        server_failed = count(r"peer client \S+ failed")
        gave_up = count(r"peer server \S+ failed") + count(r"closing before server \S+ answered our goodbye")
        print("the server failed %d clients; %d clients gave up on it first" % (server_failed, gave_up))
        self.assertLessEqual(server_failed, gave_up,
                             "the server failed no client that waited for its goodbye, in the storm of closes: " + note)
        calls = re.search(r"idle clients' calls (\d+), (\d+) failed", note)
        self.assertEqual(int(calls[2]), 0, "every idle client's call was answered: " + note)
        # 5 calls of each engine on either side of the idle phase, and the half that kept
        # calling in between (a call each 100 ms) beyond those.
        self.assertGreater(int(calls[1]), 2 * CALLS * PEERS + PEERS // 2 * 10, note)


if __name__ == "__main__":
    unittest.main(verbosity=2)
