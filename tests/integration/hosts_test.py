#!/usr/bin/env python3
"""Several hosts on one machine: three network namespaces, each its own host (its own address on
a bridge, and for UCX its own boot id, so shared memory only joins ranks of one namespace),
started by sluice-run -H and by Open MPI's mpirun through a launch agent that enters the
namespace (tests/integration/netns_agent.sh). The all-to-all ledger must be clean, ranks of one
host must talk over shared memory and ranks of different hosts over TCP (the debug log names
each pair's transports), and sluice-run's bootstrap service, which faces the network here, must
hold hostile connections off. The namespaces and addresses (10.231.1.0/24, only inside them)
are this test's own and are removed afterwards. Needs root and iproute2."""
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../fault"))
from harness import FaultHarness  # noqa: E402
from launcher_test import ALLTOALL, RUN, check_stats_table, tagged_pids, wait_gone  # noqa: E402

AGENT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "netns_agent.sh")
ADDRS = ["10.231.1.1", "10.231.1.2", "10.231.1.3"]


def sh(*args, ns=None):
    cmd = (["ip", "netns", "exec", ns] if ns else []) + list(args)
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))


class ThreeHosts(unittest.TestCase):
    """The namespaces, the bridge and each host's boot id; no tests of its own."""

    def setUp(self):
        tag = str(os.getpid() % 100000)
        self.ns = ["sluice-h%d-%s" % (i, tag) for i in range(3)]
        sw = "sluice-sw-" + tag
        for n in self.ns + [sw]:
            sh("ip", "netns", "add", n)
            self.addCleanup(subprocess.run, ["ip", "netns", "del", n], capture_output=True)
        sh("ip", "link", "add", "br0", "type", "bridge", ns=sw)
        sh("ip", "link", "set", "br0", "up", ns=sw)
        for i, n in enumerate(self.ns):
            host_end, sw_end = "sh%d%s" % (i, tag), "ss%d%s" % (i, tag)  # at most 15 characters
            sh("ip", "link", "add", host_end, "type", "veth", "peer", "name", sw_end)
            self.addCleanup(subprocess.run, ["ip", "link", "del", host_end], capture_output=True)
            sh("ip", "link", "set", host_end, "netns", n)
            sh("ip", "link", "set", sw_end, "netns", sw)
            sh("ip", "link", "set", sw_end, "master", "br0", ns=sw)
            sh("ip", "link", "set", sw_end, "up", ns=sw)
            sh("ip", "addr", "add", ADDRS[i] + "/24", "dev", host_end, ns=n)
            sh("ip", "link", "set", host_end, "up", ns=n)
            sh("ip", "link", "set", "lo", "up", ns=n)
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        hosts = []
        self.boot_id = [None]
        for i in (1, 2):  # the first namespace keeps the machine's own boot id
            boot_id = os.path.join(self.tmp.name, "boot_id-%d" % i)
            with open(boot_id, "w") as f:
                f.write(str(uuid.uuid4()) + "\n")
            hosts.append("%s=%s:%s" % (ADDRS[i], self.ns[i], boot_id))
            self.boot_id.append(boot_id)
        self.veth = ["sh%d%s" % (i, tag) for i in range(3)]
        self.mark = uuid.uuid4().hex
        self.env = dict(os.environ, TEST_NETNS_HOSTS=" ".join(hosts), TEST_JOB_MARK=self.mark,
                        SLUICE_LOG_LEVEL="debug", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        self.addCleanup(self.kill_leftovers)

    def kill_leftovers(self):
        for p in tagged_pids(self.mark):
            try:
                os.kill(p, 9)
            except ProcessLookupError:
                pass
        wait_gone(self.mark, 5)

    def enter(self, i):
        """A command prefix that runs on host i: its namespace and, beyond the first, its boot id."""
        prefix = ["ip", "netns", "exec", self.ns[i]]
        if self.boot_id[i] is None:
            return prefix
        return prefix + ["sh", "-c", 'mount --bind "$0" /proc/sys/kernel/random/boot_id && exec "$@"', self.boot_id[i]]


class Hosts(ThreeHosts):
    @staticmethod
    def comm(pid):
        try:
            with open("/proc/%d/comm" % pid) as f:
                return f.read().strip()
        except OSError:
            return ""

    def check_job(self, r):
        """Four ranks: 0 and 1 on the first host, 2 and 3 on one host each."""
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr[-4000:])
        self.assertEqual(r.stdout.count(" ok "), 4, r.stdout)
        # "sluice[R:pid] debug am: rank P ready: ...; transports T..." for every pair, both ways.
        pairs = {}
        for m in re.finditer(r"^sluice\[(\d+):\d+\] debug am: rank (\d+) ready: .*; transports (.*)$", r.stderr, re.M):
            pairs[(int(m.group(1)), int(m.group(2)))] = m.group(3).split()
        host = {0: 0, 1: 0, 2: 1, 3: 2}
        self.assertEqual(len(pairs), 12, pairs)
        for (a, b), tls in pairs.items():
            if host[a] == host[b]:
                self.assertTrue(any(t.endswith("/memory") for t in tls), (a, b, tls))
            else:
                self.assertTrue(tls and all(t.startswith("tcp/") for t in tls), (a, b, tls))
        return pairs

    def test_sluice_run_starts_ranks_on_three_hosts(self):
        r = subprocess.run(["ip", "netns", "exec", self.ns[0], RUN, "-H", "%s:2,%s,%s" % tuple(ADDRS),
                            "--launch-agent", AGENT, "--timeout", "120", ALLTOALL, "300"],
                           env=self.env, capture_output=True, text=True, timeout=180)
        pairs = self.check_job(r)
        print("sluice-run over three hosts: %s" % sorted(set(" ".join(t) for t in pairs.values())))

    def test_mpirun_starts_ranks_on_three_hosts(self):
        r = subprocess.run(["ip", "netns", "exec", self.ns[0], "mpirun", "--host", "%s:2,%s:1,%s:1" % tuple(ADDRS),
                            "-np", "4", "--mca", "plm_rsh_agent", AGENT, "--mca", "btl", "self,tcp",
                            "--mca", "btl_vader_single_copy_mechanism", "none",
                            # Open MPI's daemon maps its hwloc topology at an address it picked from
                            # a hole in its address space; one orted of a clean-clone run crashed
                            # there (SIGSEGV in hwloc_shmem_topology_write). Not shared, nothing
                            # is mapped at a fixed address.
                            "--mca", "rtc_hwloc_vmhole", "none",
                            "-x", "SLUICE_LOG_LEVEL", "-x", "TEST_JOB_MARK", ALLTOALL, "300"],
                           env=self.env, capture_output=True, text=True, timeout=180)
        self.check_job(r)
        self.assertEqual(r.stderr.count("SLUICE_BOOT=auto chose pmix"), 4, r.stderr[-3000:])

    def test_sluice_run_stats_gathers_the_counters_of_every_hosts_ranks(self):
        # Every rank says where its counters go, runs, and with TEST_SPOIL=yes then spoils
        # them: rank 1 (here) with a line too long, rank 2 (host 1) with a malformed one, rank
        # 3 (host 2) with more than the launcher takes of a rank.
        wrap = os.path.join(self.tmp.name, "stats.sh")
        with open(wrap, "w") as f:
            f.write('#!/bin/sh\necho "stats of rank $SLUICE_RANK go to $SLUICE_STATS_DEST" >&2\n"$@"\nrc=$?\n'
                    'file=${SLUICE_STATS_DEST#file:}\n'
                    'case "$SLUICE_RANK$TEST_SPOIL" in\n'
                    '  1yes) head -c 300000 /dev/zero | tr "\\0" x >>"$file"; echo >>"$file";;\n'
                    '  2yes) echo \'{"trigger": "exit", "counters": {"am.msgs_sent": 1.5}}\' >>"$file";;\n'
                    '  3yes) head -c 2000000 /dev/zero >>"$file";;\n'
                    'esac\nexit $rc\n')
        os.chmod(wrap, 0o755)
        for spoil in ("no", "yes"):
            r = subprocess.run(["ip", "netns", "exec", self.ns[0], RUN, "-H", "%s:2,%s,%s" % tuple(ADDRS),
                                "--launch-agent", AGENT, "--timeout", "120", "--stats", "--tag-output",
                                "-x", "TEST_SPOIL=" + spoil, wrap, ALLTOALL, "100"],
                               env=dict(self.env, SLUICE_STATS="1", SLUICE_LOG_LEVEL="warn"),
                               capture_output=True, text=True, timeout=180)
            self.assertEqual(r.returncode, 0, r.stderr[-4000:])
            if spoil == "no":
                self.assertIn("sluice-run: counters of 4 of 4 ranks", r.stderr)
                check_stats_table(self, r.stderr, r.stderr, r"^\[(\d+)\] (.*)$", 4)
            else:
                self.assertIn("sluice-run: counters of 1 of 4 ranks", r.stderr)
                for said in ("rank 1: line 2: longer than 262144 bytes", "rank 2: line 2: not a stats line: counter "
                             "am.msgs_sent is not a whole number", "rank 3: more than 1048576 bytes of counters"):
                    self.assertRegex(r.stderr, "(?m)^sluice-run: --stats: %s.*; its counters are left out$"
                                     % re.escape(said))
            dests = dict(re.findall(r"^\[\d+\] stats of rank (\d) go to file:(\S+)$", r.stderr, re.M))
            self.assertEqual(sorted(dests), ["0", "1", "2", "3"], r.stderr[-4000:])
            for rank, path in dests.items():  # here, the launcher's directory; elsewhere, the rank's own
                self.assertFalse(os.path.exists(os.path.dirname(path)), "rank %s: %s is left" % (rank, path))

    def test_the_bootstrap_service_holds_off_what_the_network_sends(self):
        # A job whose last rank (on the third host) starts only after the hostile clients
        # are done: the service is up, waiting for it, and must stay usable.
        delay = os.path.join(self.tmp.name, "late.sh")
        with open(delay, "w") as f:
            f.write('#!/bin/sh\n[ "$SLUICE_RANK" = 3 ] && sleep 14\nexec "$@"\n')
        os.chmod(delay, 0o755)
        job = subprocess.Popen(["ip", "netns", "exec", self.ns[0], RUN, "-H", "%s:2,%s,%s" % tuple(ADDRS),
                                "--launch-agent", AGENT, "--timeout", "120", delay, ALLTOALL, "100"],
                               env=dict(self.env, SLUICE_CONNECT_TIMEOUT="60s"), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        try:
            addr = None
            deadline = time.time() + 20
            while addr is None and time.time() < deadline:
                for pid in tagged_pids(self.mark):
                    try:
                        with open("/proc/%d/environ" % pid, "rb") as f:
                            m = re.search(rb"SLUICE_BOOT_ADDR=tcp:([\d.]+):(\d+)", f.read())
                    except OSError:
                        continue
                    if m:
                        addr = (m.group(1).decode(), int(m.group(2)))
                time.sleep(0.1)
            self.assertIsNotNone(addr, "no rank with a TCP bootstrap address")
            launcher = [p for p in tagged_pids(self.mark) if self.comm(p) == "sluice-run"][0]
            rss0 = rss_kb(launcher)
            code = ("import socket, struct, time\n"
                    "addr = (%r, %d)\n"
                    "s = socket.create_connection(addr)\n"  # a frame of 15 MiB without a token
                    "try:\n    s.sendall(struct.pack('<I', 15 << 20) + b'x' * (1 << 20))\n    s.recv(100)\n"
                    "except OSError:\n    pass\n"
                    "s.settimeout(5)\n"
                    "state = 'open'\n"
                    "try:\n    while s.recv(1 << 20):\n        pass\n    state = 'closed'\n"
                    "except socket.timeout:\n    pass\n"
                    "except OSError:\n    state = 'closed'\n"
                    "print('big', state)\n"
                    "held = []\n"
                    "for i in range(200):\n"  # more connections than a job of 4 opens
                    "    try:\n        held.append(socket.create_connection(addr, timeout=2))\n"
                    "    except OSError:\n        pass\n"
                    "time.sleep(0.5)\n"
                    "alive = 0\n"
                    "for c in held:\n"
                    "    c.setblocking(False)\n"
                    "    try:\n        alive += c.recv(1) != b''\n"
                    "    except BlockingIOError:\n        alive += 1\n"
                    "    except OSError:\n        pass\n"
                    "print('alive', alive)\n"
                    "for c in held:\n    c.close()\n"
                    "time.sleep(1)\n"
                    "idle = socket.create_connection(addr)\n"  # says nothing: closed after 10 s
                    "t = time.time()\n"
                    "idle.settimeout(30)\n"
                    "print('idle', idle.recv(1), round(time.time() - t))\n") % addr
            r = subprocess.run(["ip", "netns", "exec", self.ns[1], sys.executable, "-c", code],
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            out = dict(l.split(" ", 1) for l in r.stdout.splitlines())
            self.assertEqual(out["big"], "closed")
            self.assertLessEqual(int(out["alive"]), 2 * 4 + 16, "connections beyond the bound are closed")
            idle_s = int(out["idle"].split()[-1])
            self.assertTrue(9 <= idle_s <= 13, out["idle"])
            self.assertLess(rss_kb(launcher) - rss0, 4096, "the launcher buffered what it was sent")
            stdout, stderr = job.communicate(timeout=120)
        finally:
            if job.poll() is None:
                job.kill()
                job.communicate()
        self.assertEqual(job.returncode, 0, stderr[:6000])
        self.assertEqual(stdout.count(" ok "), 4, stdout)
        self.assertIn("rejected a bootstrap request: no request line in the first 256 bytes", stderr)
        self.assertIn("closed a bootstrap connection: too many connections", stderr)


class HostCut(ThreeHosts, FaultHarness):
    def test_a_host_whose_link_is_cut_is_declared_dead_within_the_peer_timeout(self):
        # peer_fault's ranks 0, 1, 2 on hosts 0, 1, 2 (the file bootstrap: no launcher ends the
        # job when one is lost); host 1's link drops everything: ranks 0 and 2 declare rank 1
        # dead within the timeout, everything towards it completes once, and their own flow
        # goes on to the end.
        timeout = 3.0
        self.start("stop", "", {"SLUICE_PEER_TIMEOUT": "3s", "SLUICE_HEARTBEAT": "200ms"},
                   wrap=lambda rank: self.enter(rank))
        t_cut = time.time()
        for chain, flag in (("INPUT", "-i"), ("OUTPUT", "-o")):
            sh("iptables", "-I", chain, flag, self.veth[1], "-j", "DROP", ns=self.ns[1])
        rc, r, err = self.finish(kill_victim=True)
        self.check_failure_handled(rc, r, err, t_cut, timeout + 1.5)
        self.assertGreater(float(r["first_failure_wall"]) - t_cut, timeout - 0.5, "not declared dead before the timeout")


if __name__ == "__main__":
    unittest.main(verbosity=2)
