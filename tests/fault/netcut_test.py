#!/usr/bin/env python3
"""Network faults (docs/reliability.md, "Network cut"): rank 1 in a network namespace of its own,
ranks 0 and 2 in another, joined by a veth pair, TCP only. iptables drops everything on rank
1's side of the pair for a while, or a share of the packets; tbf slows the pair down. A cut
shorter than SLUICE_PEER_TIMEOUT, loss and slowness must be ridden out: every operation
completes once, in order, nobody declared dead. A longer cut must end cleanly at the timeout:
every operation towards rank 1 completes with Unavailable within a bound, nothing from rank 1
is accepted after that, rank 2's traffic goes on. And in client/server mode (a blockstore
server on one side, clients on the other), a link that is dead, or dies during connection
set-up or just after it, fails the client within its bound, never hangs it, and a retry over
the restored link succeeds.

The namespaces, the pair, the rules and the rate limits are this test's own (addresses in
10.231.0.0/24, only inside them) and are removed afterwards. Needs root, iproute2 and
iptables (scripts/setup)."""
import os
import re
import resource
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import BLOCKSTORE, FaultHarness, open_fds, serve_blockstore


def ip(*args, ns=None):
    cmd = (["ip", "netns", "exec", ns] if ns else []) + list(args)
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


class Namespaces(FaultHarness):
    """Two network namespaces joined by a veth pair (side a: 10.231.0.1, side b: 10.231.0.2),
    rules and rate limits on side b's end; no tests of its own."""

    def setUp(self):
        tag = str(os.getpid() % 100000)
        self.ns = ["sluice-cut-a-" + tag, "sluice-cut-b-" + tag]
        self.dev = ["scuta" + tag, "scutb" + tag]  # interface names: at most 15 characters
        for n in self.ns:
            ip("ip", "netns", "add", n)
            self.addCleanup(subprocess.run, ["ip", "netns", "del", n], capture_output=True)
        ip("ip", "link", "add", self.dev[0], "type", "veth", "peer", "name", self.dev[1])
        # Gone with its namespace once moved there; this covers a set-up that fails before.
        self.addCleanup(subprocess.run, ["ip", "link", "del", self.dev[0]], capture_output=True)
        for side in (0, 1):
            ip("ip", "link", "set", self.dev[side], "netns", self.ns[side])
            ip("ip", "addr", "add", "10.231.0.%d/24" % (side + 1), "dev", self.dev[side], ns=self.ns[side])
            ip("ip", "link", "set", self.dev[side], "up", ns=self.ns[side])
            ip("ip", "link", "set", "lo", "up", ns=self.ns[side])

    def congestion_control(self, name):
        """TCP's congestion control in both namespaces (they may choose reno or bbr only)."""
        for n in self.ns:
            ip("sysctl", "-qw", "net.ipv4.tcp_congestion_control=" + name, ns=n)

    def start_split(self, mode, extra, args=(), victim=None):
        # Rank 1 alone on side b; ranks 0 and 2 on side a. Each uses its side's veth only.
        side = lambda rank: 1 if rank == 1 else 0
        self.start(mode, "tcp", extra, victim=victim, args=args,
                   rank_env=lambda r: {"UCX_NET_DEVICES": self.dev[side(r)]},
                   wrap=lambda r: ["ip", "netns", "exec", self.ns[side(r)]])

    def cut(self, probability=None, after_bytes=None):
        """Drops every packet on rank 1's side of the pair, or each with `probability`, or those
        of a connection past its first `after_bytes` bytes (both directions counted)."""
        rule = ["-m", "statistic", "--mode", "random", "--probability", str(probability)] if probability else []
        if after_bytes is not None:
            rule = ["-m", "connbytes", "--connbytes", "%d:" % after_bytes, "--connbytes-dir", "both",
                    "--connbytes-mode", "bytes"]
        for chain, flag in (("INPUT", "-i"), ("OUTPUT", "-o")):
            ip("iptables", "-I", chain, flag, self.dev[1], *rule, "-j", "DROP", ns=self.ns[1])
        return time.time()

    def restore(self):
        """Removes the rules; returns how many packets they dropped."""
        dropped = 0
        for chain in ("INPUT", "OUTPUT"):
            for line in ip("iptables", "-L", chain, "-v", "-x", "-n", ns=self.ns[1]).splitlines():
                f = line.split()
                if len(f) > 2 and f[2] == "DROP":
                    dropped += int(f[0])
        ip("iptables", "-F", ns=self.ns[1])
        return dropped

    def sockets(self, t0, counters=False):
        """Both sides' TCP sockets as the kernel sees them (ss -tin: send queue, retransmission
        timeout and back-off, congestion state), `t0` the cut's start; with `counters`, also
        each side's nonzero network counters (nstat: drops and their reasons)."""
        out = "== %.1f s after the cut\n" % (time.time() - t0)
        for side in (0, 1):
            out += "-- side %s\n%s" % ("ab"[side], ip("ss", "-tin", ns=self.ns[side]))
            if counters:
                out += ip("nstat", "-as", ns=self.ns[side])
        return out

    def check_ridden_out(self, rc, r, err, sockets=""):
        """Nobody failed, every send completed once, every receiver saw its senders in order."""
        # A failure's cause may be on the other side, or in the kernel's TCP: the other ranks'
        # stderr and the sockets' state (`sockets`) go with rank 0's.
        logs = err + "".join("rank %d's stderr:\n%s" % (rank, e) for rank, (_, _, e) in self.rest.items()) + sockets
        self.assertEqual(rc, 0, "%s\n%s" % (r, logs))
        self.assertEqual(r["dead"], "0")
        self.assertEqual(r["peers_failed"], "0", logs)
        self.assertEqual(r["failed1"], "0")
        self.assertEqual(r["sent1"], r["ok1"], "every send to rank 1 completed, once")
        self.assertEqual(r["twice"], "0")
        self.assertEqual(r["misordered"], "0", "what rank 0 received from rank 1 came in order")
        for rank in (1, 2):
            code, out, e = self.rest[rank]
            self.assertEqual(code, 0, "rank %d received everything in order: %s %s" % (rank, out, e))


class NetworkCut(Namespaces):
    def test_cut_shorter_than_the_peer_timeout_is_ridden_out_in_order(self):
        # 3 s without a packet, timeout 20 s. TCP's retransmission timeout doubles from at
        # least 200 ms, so its first retry after the cut comes at most about twice the cut's
        # length after it began (a 10 s timeout failed a peer after a 5 s cut in one run of the
        # full suite). Reno, not this host's BBR: after a cut, BBR sometimes sends one
        # retransmission and then nothing for 7 s, once for over 17 s (measured;
        # docs/reliability.md, "Network cuts and BBR"). That stall is the kernel's, not what
        # this test is about. The sockets' state goes with a failure. Longer cuts are run by hand.
        self.congestion_control("reno")
        self.start_split("stop-survive", {"SLUICE_PEER_TIMEOUT": "20s", "SLUICE_HEARTBEAT": "200ms"}, args=["16"])
        t_cut = self.cut()
        time.sleep(3)
        self.assertGreater(self.restore(), 0, "packets were dropped")
        # The sockets after the cut, while the ranks still run (16 s), for a failure's message.
        sockets = ""
        for n in range(3):
            time.sleep(3)
            sockets += self.sockets(t_cut, counters=n == 2)
        rc, r, err = self.finish()
        self.check_ridden_out(rc, r, err, sockets)
        # The cut did stop the flow to rank 1 (rank 0 always has sends open towards it), and
        # it resumed well before the timeout.
        self.assertGreater(float(r["gap1_s"]), 2.5, r)
        self.assertLess(float(r["gap1_s"]), 15.0, r)

    def test_lossy_link_loses_nothing_and_keeps_order(self):
        # 10 % of the packets each way dropped for 5 s: TCP retransmits; nothing may fail, be
        # lost or come out of order.
        self.start_split("stop-survive", {"SLUICE_PEER_TIMEOUT": "10s", "SLUICE_HEARTBEAT": "200ms"}, args=["8"])
        self.cut(probability=0.1)
        time.sleep(5)
        dropped = self.restore()
        self.assertGreater(dropped, 0, "packets were dropped")
        rc, r, err = self.finish()
        self.check_ridden_out(rc, r, err)
        print("lossy link: %d packets dropped, %s sends to rank 1 completed" % (dropped, r["ok1"]))

    def test_slow_link_is_no_failure_and_keeps_order(self):
        # 20 Mbit/s each way between the sides (tbf on both ends of the pair) for the whole
        # run; rank 0 keeps 32 messages in flight to rank 1, every 16th a 1 MiB rendezvous
        # payload, so its flow crawls at the link's pace; rank 1 answers with small messages
        # every millisecond (its own 1 MiB payloads, 128 MB/s of them, would pile up faster
        # than the link drains them, and its bounded close would cut the pile off). Credits,
        # acknowledgements and heartbeats share the sockets with the payloads, and still
        # nobody is declared dead at the default timeout and nothing is lost or reordered.
        for side in (0, 1):
            ip("tc", "qdisc", "add", "dev", self.dev[side], "root", "tbf", "rate", "20mbit", "burst", "32kbit",
               "latency", "400ms", ns=self.ns[side])
        self.start_split("stop-survive", {}, args=["8"], victim={"PEER_FAULT_LARGE_EVERY": "0"})
        rc, r, err = self.finish()
        self.check_ridden_out(rc, r, err)
        print("slow link: %s sends to rank 1 completed, longest wait for one %s s" % (r["ok1"], r["gap1_s"]))

    def test_cut_longer_than_the_peer_timeout_ends_cleanly_at_the_timeout(self):
        timeout = 3.0
        self.start_split("stop", {"SLUICE_PEER_TIMEOUT": "3s", "SLUICE_HEARTBEAT": "200ms"})
        t_cut = self.cut()
        time.sleep(5)
        # The network comes back while rank 0 still runs: rank 1's late packets must not
        # bring it back to life.
        self.assertGreater(self.restore(), 0, "packets were dropped")
        rc, r, err = self.finish(kill_victim=True)
        self.check_failure_handled(rc, r, err, t_cut, timeout + 1.5)
        self.assertGreater(float(r["first_failure_wall"]) - t_cut, timeout - 0.5, "not declared dead before the timeout")
        self.assertEqual(r["from1"], r["from1_at_death"], "nothing from rank 1 reached a handler after its failure")


class ConnectionSetUp(Namespaces):
    """A blockstore server on side a, clients on side b (client/server mode, the stream transport)."""

    # Every client on the stream transport: the same host would otherwise give it shared memory.
    ENV = {"SLUICE_CS_TRANSPORT": "stream", "SLUICE_CONNECT_TIMEOUT": "2s", "SLUICE_PEER_TIMEOUT": "3s"}

    def client(self, port):
        cmd = ["ip", "netns", "exec", self.ns[1], BLOCKSTORE, "check", "10.231.0.1:%d" % port, "4"]
        env = dict(os.environ, UCX_NET_DEVICES=self.dev[1], **self.ENV)
        t = time.time()
        cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
        cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.cpu = (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime)
        return r.returncode, time.time() - t, r.stdout + r.stderr

    def test_set_up_through_a_dead_or_dying_link_fails_within_its_bound_and_a_retry_succeeds(self):
        # docs/reliability.md, "reset or death during connection set-up". The link is dead from the
        # first packet, or dies after 300 bytes (inside the connection's set-up) or after 2000
        # (after the handshake, inside the first writes): each time the client ends with a
        # clear error within its bound — the connect timeout, or the peer timeout once
        # connected — and never hangs; the link back, the same client program succeeds; the
        # server keeps serving and is left with no more file descriptors than before.
        env = dict(os.environ, UCX_NET_DEVICES=self.dev[0], **self.ENV)
        server, port = serve_blockstore(self, "10.231.0.1", env, prefix=["ip", "netns", "exec", self.ns[0]])
        rc, _, out = self.client(port)
        self.assertEqual(rc, 0, out)
        time.sleep(0.5)
        fds = open_fds(server.pid)
        unlisted = self.unlisted_sockets(server.pid)
        for after, bound, reason in ((None, 4.5, "within SLUICE_CONNECT_TIMEOUT=2s"),
                                     (300, 4.5, "within SLUICE_CONNECT_TIMEOUT=2s"),
                                     (2000, 5.5, "silent for")):
            with self.subTest(cut_after_bytes=after):
                self.cut(after_bytes=after)
                rc, took, out = self.client(port)
                self.assertGreater(self.restore(), 0, "packets were dropped")
                self.assertNotEqual(rc, 0, out)
                self.assertLess(took, bound, out)
                self.assertIn(reason, out)
                if after is None:  # connect() waits for the TCP connection asleep
                    print("a connect through a dead link: %.2f s, %.2f s of CPU" % (took, self.cpu))
                    self.assertLess(self.cpu, 0.5 * took, "the client slept while it waited, not spun")
                rc, _, out = self.client(port)
                self.assertEqual(rc, 0, "a retry over the restored link: " + out)
                self.assertIn("0 mismatches, 0 errors", out)
        # The server declares the broken clients dead at its peer timeout and lets them go.
        time.sleep(4)
        self.assertIsNone(server.poll(), "the server still serves")
        # Every descriptor is back but for TCP sockets closed beneath UCX that its TCP transport
        # still holds: at most one per client that died behind the cut (UCX's; reliability.md,
        # "Not done yet"). They are in no TCP state ss lists, where every socket of Sluice's own
        # is (listening, or a link, which Sluice closes as soon as its connection ends).
        ucx_kept = len(self.unlisted_sockets(server.pid) - unlisted)
        left = subprocess.run(["ip", "netns", "exec", self.ns[0], "ss", "-tanpe"], capture_output=True, text=True).stdout
        print("the server has %d descriptors (%d before), %d of them TCP sockets UCX keeps closed beneath it"
              % (open_fds(server.pid), fds, ucx_kept))
        self.assertLessEqual(ucx_kept, 3, left)
        self.assertLessEqual(open_fds(server.pid) - ucx_kept, fds, "no file descriptor left behind:\n" + left)

    def unlisted_sockets(self, pid):
        """The inodes of `pid`'s sockets that `ss` lists in no state (TCP, UDP, Unix, netlink)."""
        listed = set()
        for kind in ("-tanpe", "-anpe"):
            r = subprocess.run(["ip", "netns", "exec", self.ns[0], "ss", kind], capture_output=True, text=True)
            listed |= set(re.findall(r"ino:(\d+)", r.stdout)) | set(re.findall(r" (\d+) +\* ", r.stdout))
        mine = set()
        for fd in os.listdir("/proc/%d/fd" % pid):
            try:
                target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
            except OSError:
                continue
            m = re.match(r"socket:\[(\d+)\]", target)
            if m:
                mine.add(m.group(1))
        return mine - listed

if __name__ == "__main__":
    unittest.main(verbosity=2)
