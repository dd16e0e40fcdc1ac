#!/usr/bin/env python3
"""Peer failure: a receiver killed (SIGKILL) or stopped (SIGSTOP) while rendezvous and eager
traffic is in flight, over shared memory and over TCP. Three processes started by hand with the
file bootstrap; rank 0 reports (see peer_fault.cpp)."""
import os
import re
import signal
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import FaultHarness


class PeerFailure(FaultHarness):
    def check_kill(self, tls, extra, bound):
        self.start("kill", tls, extra)
        # Stop the victim a moment first, so that operations towards it are surely in flight
        # (rendezvous payloads it has not pulled, or messages waiting for credits) when it dies;
        # a running victim on a fast transport may have completed all of them by then.
        self.procs[1].send_signal(signal.SIGSTOP)
        time.sleep(0.3)
        t_kill = time.time()
        self.procs[1].send_signal(signal.SIGKILL)
        rc, r, err = self.finish()
        self.check_failure_handled(rc, r, err, t_kill, bound)

    def test_killed_receiver_tcp(self):
        self.check_kill("tcp", {"SLUICE_PEER_TIMEOUT": "10s"}, 2.0)

    def test_killed_receiver_shared_memory(self):
        # UCX does not report a dead peer on shared memory: the heartbeat does.
        self.check_kill("", {"SLUICE_PEER_TIMEOUT": "2s", "SLUICE_HEARTBEAT": "200ms"}, 3.5)

    def check_fault_point(self, point, tls, extra, bound):
        # The victim ends itself at the named protocol step (SLUICE_FAULT_AT, lib/core/fault.h);
        # its exit status 86 proves it got there.
        self.start("kill", tls, extra, victim={"SLUICE_FAULT_AT": point})
        _, err1 = self.procs[1].communicate(timeout=60)
        self.assertEqual(self.procs[1].returncode, 86, "rank 1 did not die at fault point %s: %s" % (point, err1))
        m = re.search(r"fault point %s reached \(SLUICE_FAULT_AT\) at ([0-9.]+)" % re.escape(point), err1)
        self.assertIsNotNone(m, err1)
        rc, r, err = self.finish()
        self.check_failure_handled(rc, r, err, float(m.group(1)), bound)

    def test_victim_dies_at_each_protocol_step_tcp(self):
        # RELIABILITY.md, failure at each protocol step on either side: rank 1 dies in the
        # handshake, as the sender of a rendezvous (before its announcement; after its payload's
        # send is posted, before rank 0 has pulled it), and as a receiver (after posting the
        # receive for a payload rank 0 announced; before returning credits). Rank 0 must see what
        # it sees for a kill.
        for point in ("hello", "rndv-announce", "rndv-payload", "rndv-land", "credit-return"):
            with self.subTest(point=point):
                self.check_fault_point(point, "tcp", {"SLUICE_PEER_TIMEOUT": "10s", "SLUICE_CONNECT_TIMEOUT": "3s"},
                                       2.0)

    def test_victim_dies_mid_rendezvous_shared_memory(self):
        for point in ("rndv-payload", "rndv-land"):
            with self.subTest(point=point):
                self.check_fault_point(point, "", {"SLUICE_PEER_TIMEOUT": "2s", "SLUICE_HEARTBEAT": "200ms"}, 3.5)

    def test_stopped_beyond_the_timeout_is_declared_dead_and_its_late_messages_dropped(self):
        self.start("stop", "", {"SLUICE_PEER_TIMEOUT": "2s", "SLUICE_HEARTBEAT": "200ms"})
        self.procs[1].send_signal(signal.SIGSTOP)
        t0 = time.time()
        time.sleep(4)
        self.procs[1].send_signal(signal.SIGCONT)
        rc, r, err = self.finish(kill_victim=True)
        self.assertEqual(rc, 0, "%s\n%s" % (r, err))
        self.assertEqual(r["dead"], "1")
        self.assertLess(float(r["detect_s"]), 3.5)
        self.assertGreaterEqual(float(r["detect_s"]), 1.5)
        self.assertGreater(int(r["dropped"]), 0, "messages sent after it resumed are dropped, counted")
        self.assertEqual(r["from1"], r["from1_at_death"], "nothing from it reaches a handler after the failure")

    def test_stopped_within_the_timeout_is_no_failure(self):
        self.start("stop-survive", "", {"SLUICE_PEER_TIMEOUT": "10s", "SLUICE_HEARTBEAT": "200ms"})
        self.procs[1].send_signal(signal.SIGSTOP)
        time.sleep(3)
        self.procs[1].send_signal(signal.SIGCONT)
        rc, r, err = self.finish()
        self.assertEqual(rc, 0, "%s\n%s" % (r, err))
        self.assertEqual(r["dead"], "0")
        self.assertEqual(r["failed1"], "0")
        self.assertEqual(r["peers_failed"], "0", err)
        self.assertEqual(r["sent1"], r["ok1"])
        self.assertEqual(r["misordered"], "0")
        self.assertEqual(self.rest[1][0], 0, "rank 1 received everything in order: " + self.rest[1][1])


if __name__ == "__main__":
    unittest.main(verbosity=2)
