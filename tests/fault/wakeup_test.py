"""UCX's shared-memory wake-up sockets under attack (docs/security.md, "UCX's wake-up sockets").

Each shared-memory FIFO of UCX 1.13 has a Unix datagram socket bound to an abstract name: a
sender whose receiver sleeps sends it one byte. Abstract names carry no permissions, so any
process in the network namespace can send to them; `ss -xap` lists them. UCX reads one
datagram per attempt to sleep (up to 32 bytes of it) and treats any datagram as "look at the
FIFO"; an empty one reads as a closed peer. When the engine tries to sleep, that makes the
attempt fail (Worker::arm: progress instead of sleeping); when UCX polls an idle interface by
itself (adaptive progress), it aborts the process, so Sluice turns that off where UCX's TCP is
left out. These tests send every length, empty ones and a flood to each socket of a real
`blockstore serve` and of its client while the client checks blocks: the check completes, the
server lives and logs nothing, and it goes back to sleep once the datagrams stop. A rank-mode
job on one host leaves UCX's TCP out too and lives through them; where UCX's TCP is allowed
(SLUICE_UCX_TCP=y, a job across hosts), the abort is still there."""
import multiprocessing
import os
import re
import socket
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import BLOCKSTORE, BUILD, serve_blockstore  # noqa: E402

SLUICE_RUN = os.path.join(BUILD, "apps/sluice-run")
SLUICE_PERF = os.path.join(BUILD, "perf/sluice-perf")

# Lengths around what UCX reads at once (32 bytes), a page, and a datagram near the socket's limit.
LENGTHS = (0, 1, 31, 32, 33, 4096, 65536)


def wakeup_sockets(pid):
    """The abstract names of the Unix datagram sockets process `pid` holds, as `ss -xap` lists them."""
    out = subprocess.run(["ss", "-Hxap"], capture_output=True, text=True, check=True).stdout
    return sorted(line.split()[4] for line in out.splitlines()
                  if line.startswith("u_dgr") and "pid=%d," % pid in line)


def sender():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
    s.setblocking(False)
    return s


def send_to(s, name, data):
    """One datagram from socket `s` to the abstract name `name` (@xxxxx): True when queued,
    False when the receiver's queue was full, None when the socket is gone."""
    try:
        s.sendto(data, b"\0" + name[1:].encode())
        return True
    except BlockingIOError:
        return False
    except ConnectionRefusedError:
        return None


def send_empty(names, rounds, pause):
    """`rounds` empty datagrams to each of `names` in turn, `pause` seconds between rounds."""
    with sender() as s:
        for _ in range(rounds):
            for name in names:
                send_to(s, name, b"")
            time.sleep(pause)


def flood(names, seconds, counts):
    """Datagrams of every length in turn at each name, as fast as one process can send them."""
    names, sent, i = list(names), 0, 0
    end = time.monotonic() + seconds
    with sender() as s:
        while names and time.monotonic() < end:
            name = names[i % len(names)]
            queued = send_to(s, name, bytes(LENGTHS[i % len(LENGTHS)]))
            if queued is None:  # the client ended: its socket is gone
                names.remove(name)
            else:
                sent += queued
            i += 1
    counts.put(sent)


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_share(pid, seconds):
    """The share of one core process `pid` used over the next `seconds`."""
    t0, c0 = time.monotonic(), cpu_seconds(pid)
    time.sleep(seconds)
    return (cpu_seconds(pid) - c0) / (time.monotonic() - t0)


class WakeUpSockets(unittest.TestCase):
    def setUp(self):
        self.server, self.port = serve_blockstore(self, "127.0.0.1", os.environ)
        self.check(1)  # UCX's lazy start-up: a server that has served, its sockets made

    def check(self, blocks):
        r = subprocess.run([BLOCKSTORE, "check", "127.0.0.1:%d" % self.port, str(blocks)], capture_output=True,
                           text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr[-2000:])
        self.assertIn("0 mismatches, 0 errors", r.stdout)
        return r.stderr

    def server_log(self):
        self.server.kill()
        _, err = self.server.communicate()
        return err

    def assert_sleeps(self, what):
        # A sleeping server wakes for its timers a few times a second; a spinning one uses a core.
        share = cpu_share(self.server.pid, 2.0)
        print("the server used %.1f %% of a core in the 2 s after %s" % (100 * share, what))
        self.assertLess(share, 0.25, "the server sleeps again after " + what)

    def send_every_length(self, names, each=100):
        """`each` datagrams of every length to each name in turn, paced; how many each socket
        accepted (-1: its socket closed meanwhile)."""
        accepted = dict.fromkeys(names, 0)
        with sender() as s:
            for n in LENGTHS:
                for _ in range(each):
                    for name in names:
                        if accepted[name] >= 0:
                            queued = send_to(s, name, bytes(n))
                            accepted[name] = -1 if queued is None else accepted[name] + queued
                    time.sleep(0.0005)
        return accepted

    def test_every_length_and_empty_datagrams_to_a_sleeping_server_leave_it_asleep_and_serving(self):
        # Three rounds, each after a client has come and gone: its going leaves the server's
        # shared-memory interface without an endpoint, the state in which UCX's own polling of it
        # aborted on an empty datagram (9 of 10 servers with UCX_ADAPTIVE_PROGRESS=y).
        # The engine's worker reads its socket whenever it goes to sleep, so that queue never
        # fills; a socket nobody sleeps on (the FIFO probe's) holds the kernel's
        # net.unix.max_dgram_qlen datagrams, charged to the sender, and refuses the rest.
        with open("/proc/sys/net/unix/max_dgram_qlen") as f:
            qlen = int(f.read())
        every = 100 * len(LENGTHS)
        for round in range(3):
            names = wakeup_sockets(self.server.pid)
            print("the server's wake-up sockets: %s" % names)
            self.assertGreaterEqual(len(names), 1, "ss -xap lists the server's shared-memory wake-up socket")
            for name in names:
                self.assertRegex(name, r"^@[0-9a-f]{5}$", "an autobound abstract name")
            accepted = self.send_every_length(names)
            print("datagrams accepted of %d sent to each: %s" % (every, accepted))
            self.assertIsNone(self.server.poll(), "the server lives: " + (self.server_log()[-2000:]
                                                                          if self.server.poll() is not None else ""))
            self.assertIn(every, accepted.values(), "the worker's socket took every datagram")
            for name, n in accepted.items():
                self.assertTrue(n == every or n <= qlen + 1, "%s: read, held to its queue" % name)
            self.assertEqual(self.check(1), "", "a client checks a block at once, with nothing to warn of")
        self.assert_sleeps("%d datagrams of 0 to 64 KiB" % (3 * every * len(names)))
        self.assertEqual(self.server_log(), "", "the server logged nothing about the datagrams")

    def test_with_ucx_tcp_allowed_an_empty_datagram_can_still_end_the_server(self):
        # Where UCX's TCP may be used (SLUICE_UCX_TCP=y here; a job across hosts), Sluice leaves
        # UCX's adaptive progress on, and UCX 1.13.1 aborts on an empty datagram read by its own
        # polling of an idle shared-memory interface. Up to 5 servers: one ends (each 9 in 10
        # alone). The datagrams go on for up to 2 s, until the server ends: a server still busy
        # when they come (other tests sharing the cores) reads them in its progress, not in an
        # arm, and lives; a burst of 50 ms let all 5 live in one run of the whole suite.
        env = dict(os.environ, SLUICE_UCX_TCP="y")
        for attempt in range(5):
            server, port = serve_blockstore(self, "127.0.0.1", env)
            r = subprocess.run([BLOCKSTORE, "check", "127.0.0.1:%d" % port, "1"], capture_output=True, env=env,
                               timeout=60)
            self.assertEqual(r.returncode, 0)
            names = wakeup_sockets(server.pid)
            deadline = time.monotonic() + 2
            while server.poll() is None and time.monotonic() < deadline:
                send_empty(names, 10, 0.005)
            time.sleep(0.2)
            if server.poll() is not None:
                _, err = server.communicate()
                print("attempt %d: the server ended (%d): %s" % (attempt + 1, server.returncode,
                                                                  err.strip().splitlines()[0]))
                self.assertIn("failed to arm iface", err)
                return
            server.kill()
            server.communicate()
        self.fail("5 servers with UCX's TCP allowed lived through empty datagrams: UCX no longer aborts; "
                  "docs/security.md should say so")

    def test_a_flood_at_every_wakeup_socket_of_server_and_client_loses_no_block(self):
        # 1,200 blocks: about 6 s here, longer than the flood (600 once took 1.2 s and ended first).
        client = subprocess.Popen([BLOCKSTORE, "check", "127.0.0.1:%d" % self.port, "1200"], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        self.addCleanup(lambda: client.poll() is None and (client.kill(), client.communicate()))
        deadline = time.monotonic() + 10
        while not wakeup_sockets(client.pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        # Every socket the two processes listen on or can be reached at: TCP (ss -ltnp), the door
        # alone and nothing in the client; Unix datagrams (ss -xap), the server's worker and FIFO
        # probe and the client's worker.
        tcp = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True).stdout.splitlines()
        self.assertEqual([line.split()[3] for line in tcp if "pid=%d," % self.server.pid in line],
                         ["127.0.0.1:%d" % self.port], "the server listens on TCP at its door alone")
        self.assertEqual([line for line in tcp if "pid=%d," % client.pid in line], [], "a client listens nowhere")
        server_names, client_names = wakeup_sockets(self.server.pid), wakeup_sockets(client.pid)
        self.assertEqual((len(server_names), len(client_names)), (2, 1), "wake-up sockets: server 2, client 1")
        names = server_names + client_names
        print("flooding the wake-up sockets of the server and its client: %s" % names)
        counts = multiprocessing.Queue()
        floods = [multiprocessing.Process(target=flood, args=(names, 3.0, counts)) for _ in range(2)]
        for p in floods:
            p.start()
        busy = cpu_share(self.server.pid, 2.5)
        for p in floods:
            p.join(10)
        sent = sum(counts.get(timeout=5) for _ in floods)
        self.assertIsNone(client.poll(), "the check (about 6 s) ran through the whole flood")
        out, err = client.communicate(timeout=120)
        print("%d datagrams sent in 3 s by 2 processes; the server used %.0f %% of a core meanwhile"
              % (sent, 100 * busy))
        self.assertGreater(sent, 1000, "the flood got through to the sockets")
        self.assertEqual(client.returncode, 0, out + err[-2000:])
        self.assertIn("0 mismatches, 0 errors", out)
        self.assertIsNone(self.server.poll(), "the server lives")
        self.check(4)
        self.assert_sleeps("the flood")
        log = self.server_log()
        self.assertIsNone(re.search(r"error|failed|wakeup", log, re.I), log[-2000:])

    def rank_job_under_empty_datagrams(self, env, iters=200000):
        """A short two-rank am_lat job (5 rounds of `iters`) under sluice-run, sent empty datagrams
        at its ranks' wake-up sockets from its start to its end: its exit status, output, the
        sockets found and the TCP ports its processes listened on meanwhile (`ss -ltnp`)."""
        job = subprocess.Popen([SLUICE_RUN, "-n", "2", SLUICE_PERF, "-t", "am_lat", "-s", "8", "-n", str(iters)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        self.addCleanup(lambda: job.poll() is None and (job.kill(), job.communicate()))
        names, listening, deadline = set(), set(), time.monotonic() + 60
        while job.poll() is None and time.monotonic() < deadline:
            pids = [job.pid] + list(map(int, subprocess.run(["pgrep", "-P", str(job.pid)], capture_output=True,
                                                            text=True).stdout.split()))
            for pid in pids[1:]:
                names.update(wakeup_sockets(pid))
            listening.update(line.split()[3] for line in subprocess.run(["ss", "-Hltnp"], capture_output=True,
                                                                        text=True).stdout.splitlines()
                             if any("pid=%d," % pid in line for pid in pids))
            send_empty(names, 20, 0.001)
        out, _ = job.communicate(timeout=30)
        self.assertTrue(names, "the ranks' wake-up sockets")
        return job.returncode, out, names, listening

    def test_a_rank_mode_job_on_one_host_lives_through_empty_datagrams_and_listens_on_no_tcp_port(self):
        # sluice-run says every rank is on this host (SLUICE_LOCAL_SIZE): UCX's TCP is left out,
        # so adaptive progress is off and no process of the job listens on TCP. Five jobs, each
        # sent empty datagrams from start to end (with UCX's TCP, 2 of 3 such jobs end in an abort).
        for attempt in range(5):
            code, out, names, listening = self.rank_job_under_empty_datagrams(os.environ)
            print("job %d: %d wake-up sockets, ended with %d, TCP listeners %s" %
                  (attempt + 1, len(names), code, sorted(listening)))
            self.assertEqual(code, 0, out[-2000:])
            self.assertIn("am_lat", out)
            self.assertEqual(listening, set(), "a job on one host opens no TCP port")

    def test_a_rank_mode_job_with_ucx_tcp_can_be_ended_by_empty_datagrams(self):
        # With UCX's TCP (SLUICE_UCX_TCP=y here; a job across hosts by default), adaptive progress
        # stays on (docs/security.md): empty datagrams from the job's start to its end end it, a
        # rank aborting in UCX (within the first three jobs in each of five runs; in one run, 6 jobs
        # of under 2 s each all lived). Up to 8 jobs of twice the other test's length, within 150 s
        # (a loaded machine slows a ping-pong many times over): one ends.
        started = time.monotonic()
        for attempt in range(8):
            if time.monotonic() - started > 150:
                break
            code, out, _, listening = self.rank_job_under_empty_datagrams(dict(os.environ, SLUICE_UCX_TCP="y"),
                                                                           iters=400000)
            fatal = next((line for line in out.splitlines() if "Fatal" in line), "")
            print("attempt %d: the job ended with %d: %s" % (attempt + 1, code, fatal or "completed"))
            self.assertTrue(listening, "UCX's TCP ports")
            if code != 0:
                self.assertIn("failed to arm iface", out)
                return
        # Not reproduced: the abort is a race that a run can miss entirely.
        # test_with_ucx_tcp_allowed_an_empty_datagram_can_still_end_the_server shows it each time.
        self.skipTest("%d rank-mode jobs (up to 8, within 150 s) lived through empty datagrams: the abort was "
                      "not reproduced; if it never is, UCX may no longer abort (docs/security.md)" % (attempt + 1))

if __name__ == "__main__":
    unittest.main(verbosity=2)
