#!/usr/bin/env python3
"""Integration tests with real processes: sluice-run, Open MPI's mpirun (PMIx), the static
file bootstrap, sluice-info. Every process this starts runs under a watchdog (timeout), and
every job is tagged so that leftover processes can be found in /proc."""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import uuid

BUILD = os.environ.get("TEST_BUILD_DIR", os.path.join(os.path.dirname(__file__), "../../build"))
SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "../.."))
RUN = os.path.join(BUILD, "apps/sluice-run")
INFO = os.path.join(BUILD, "apps/sluice-info")
STATS = os.path.join(BUILD, "apps/sluice-stats")
ALLTOALL = os.path.join(BUILD, "tests/alltoall")
PING = os.path.join(BUILD, "apps/examples/ping")
BLOCKSTORE = os.path.join(BUILD, "apps/examples/blockstore")
WATCHDOG = 120


def tagged_pids(mark):
    """Processes whose environment carries `mark`."""
    pids = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open("/proc/%s/environ" % p, "rb") as f:
                if mark.encode() in f.read():
                    pids.append(int(p))
        except OSError:
            pass
    return [p for p in pids if p != os.getpid()]


def wait_gone(mark, seconds):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if not tagged_pids(mark):
            return True
        time.sleep(0.05)
    return not tagged_pids(mark)


def run(args, env=None, timeout=WATCHDOG):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run(args, env=e, capture_output=True, text=True, timeout=timeout)


def check_stats_table(test, table_text, ranks_text, tag, n):
    """The table of sluice-run --stats or sluice-stats in `table_text` against what each of the
    `n` ranks printed of itself at exit (SLUICE_STATS=1) in `ranks_text`, its lines prefixed as
    `tag` says (group 1: the rank, group 2: the text): every shown counter's sum, minimum and
    maximum, and the ranks named at the extremes. Returns the table, counter -> [sum, min,
    min's rank, max, max's rank]."""
    own = {}  # rank -> counter -> value, summed over the rank's engines
    in_block = set()
    for line in ranks_text.splitlines():
        m = re.match(tag, line)
        if not m:
            continue
        rank, text = int(m.group(1)), m.group(2)
        if text.startswith("sluice stats (rank "):
            in_block.add(rank)
            own.setdefault(rank, {})
            continue
        c = re.match(r"^([a-z_][\w.]*) +(\d+)$", text)
        if c and rank in in_block:
            own[rank][c.group(1)] = own[rank].get(c.group(1), 0) + int(c.group(2))
    test.assertEqual(sorted(own), list(range(n)), ranks_text[-3000:])
    table = {}
    for m in re.finditer(r"^  (\S+) +(\d+) +(\d+) \(rank (\d+)\) +(\d+) \(rank (\d+)\)$", table_text, re.M):
        table[m.group(1)] = [int(g) for g in m.groups()[1:]]
    names = set().union(*own.values())
    shown = {name for name in names if any(own[k].get(name, 0) for k in own)}
    test.assertEqual(set(table), shown, table_text[-3000:])
    for name, (total, lo, lo_rank, hi, hi_rank) in table.items():
        values = [own[k].get(name, 0) for k in range(n)]
        test.assertEqual(total, sum(values), name)
        test.assertEqual((lo, hi), (min(values), max(values)), name)
        test.assertEqual(values[lo_rank], lo, name)
        test.assertEqual(values[hi_rank], hi, name)
    return table


class Launcher(unittest.TestCase):
    def setUp(self):
        self.mark = "TEST_JOB_MARK=%s" % uuid.uuid4().hex
        self.env = {"TEST_JOB_MARK": self.mark.split("=")[1]}

    def tearDown(self):
        for p in tagged_pids(self.mark):
            os.kill(p, signal.SIGKILL)

    def test_alltoall_four_ranks_shared_memory_and_tcp(self):
        for tls in ("", "tcp"):
            r = run([RUN, "-n", "4", ALLTOALL, "1000"], env=dict(self.env, SLUICE_TLS=tls))
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stdout.count(" ok "), 4, r.stdout)
            # UCX names a setting of Sluice's that no transport took (configuration.md).
            self.assertNotIn("invalid configuration", r.stdout + r.stderr, tls)

    def test_a_million_small_messages_each_way_between_two_processes(self):
        # Volume: 1,000,000 messages of 0-64 bytes from each rank to the other, every CRC and
        # the order checked by the receiver, over shared memory and over TCP.
        for tls in ("", "tcp"):
            r = run([RUN, "-n", "2", ALLTOALL, "1000000", "--small"], env=dict(self.env, SLUICE_TLS=tls))
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stdout.count("ok (1000000 messages from each peer)"), 2, r.stdout)

    def test_ucx_shm_alias_alone_carries_the_ranks_messages(self):
        # UCX's alias shm (sysv, posix, cma, knem, xpmem), the name every UCX user types: alone,
        # shared memory is the ranks' only way to each other, and it takes its error handling on.
        r = run([RUN, "-n", "2", ALLTOALL, "1000"], env=dict(self.env, SLUICE_TLS="shm"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.count(" ok "), 2, r.stdout)

    def test_exhausted_pools_under_mixed_all_to_all_load_never_stall(self):
        # docs/reliability.md's pool-exhaustion scenario (the brpc stall): 4 ranks, all-to-all plus
        # fan-in to rank 0, 64-byte and 2 MiB messages, send and receive pools shrunk to a few
        # slots (the receive budget holds two 2 MiB landings: the third waits), credits to 4.
        # The program checks the ledger and that no sender's small messages went quiet for 2 s;
        # here, that the pools and credits really ran dry.
        shrunk = dict(self.env, SLUICE_CREDITS="4", SLUICE_RX_POSTED="2", SLUICE_SEND_QUEUE_MAX="64",
                      SLUICE_POOL_CHUNK="256K", SLUICE_SEND_POOL_MAX="512K", SLUICE_RECV_POOL_MAX="6M",
                      SLUICE_POOL_CLASSES="64K", ALLTOALL_STALL_MS="2000")
        for tls, seconds in (("", 30), ("tcp", 10)):
            r = run([RUN, "-n", "4", ALLTOALL, "--mixed", str(seconds)], env=dict(shrunk, SLUICE_TLS=tls),
                    timeout=seconds + WATCHDOG)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr[-4000:])
            self.assertEqual(r.stdout.count("ok (mixed load"), 4, r.stdout)
            would_block = credit_stalls = large = refused = 0
            for line in r.stdout.splitlines():
                if line.startswith("mixed: rank") and " received " in line:
                    f = line.split()
                    large += int(f[f.index("large,") - 1])
                    refused += int(f[f.index("refused,") - 2])
                    would_block += int(f[f.index("flow.would_block") + 1])
                    credit_stalls += int(f[f.index("flow.credit_stalls") + 1])
            self.assertGreater(large, 0, r.stdout)
            # 6 MiB holds a 2 MiB landing beside every reservation these credits can reach.
            self.assertEqual(refused, 0, "no large message was refused: " + r.stdout)
            self.assertGreater(would_block, 0, "the send pool or queue never refused a send: " + r.stdout)
            self.assertGreater(credit_stalls, 0, "no sender ever waited for credits: " + r.stdout)

    def test_payloads_the_receive_budget_can_never_hold_fail_their_sends_not_their_peers(self):
        # Mixed 64 B and 2 MiB all-to-all among 4 ranks whose receive budget can never hold a 2 MiB
        # payload beside the reservations for 3 peers: each large send fails alone, with a status
        # naming the sizes and the variable; every rank finishes its checks.
        for budget in ("1M", "3M"):
            r = run([RUN, "-n", "4", ALLTOALL, "--mixed", "2"], env=dict(self.env, SLUICE_RECV_POOL_MAX=budget),
                    timeout=2 + WATCHDOG)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr[-4000:])
            self.assertEqual(r.stdout.count("ok (mixed load"), 4, r.stdout)
            self.assertIn("refused the message: a 2097152-byte payload, which SLUICE_RECV_POOL_MAX=%s can never hold"
                          % budget, r.stdout)
            self.assertNotIn("failed:", r.stderr, "no peer failed")

    def test_rank_exit_status_is_the_jobs_and_nothing_is_left(self):
        t0 = time.time()
        r = run([RUN, "-n", "3", ALLTOALL, "--exit-rank", "1", "3"], env=self.env)
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertLess(time.time() - t0, 5.0)
        self.assertIn("rank 1", r.stderr)
        self.assertIn("exited with status 3", r.stderr)
        self.assertTrue(wait_gone(self.mark, 2), tagged_pids(self.mark))

    def test_hanging_rank_is_ended_by_the_timeout(self):
        r = run([RUN, "-n", "2", "--timeout", "5", ALLTOALL, "--hang-rank", "1"], env=self.env)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--timeout", r.stderr)
        self.assertTrue(wait_gone(self.mark, 2), tagged_pids(self.mark))

    def test_killed_launcher_takes_its_ranks_along(self):
        e = dict(os.environ, **self.env)
        p = subprocess.Popen([RUN, "-n", "3", "sleep", "100"], env=e)
        deadline = time.time() + 10
        while len(tagged_pids(self.mark)) < 4 and time.time() < deadline:
            time.sleep(0.05)
        self.assertEqual(len(tagged_pids(self.mark)), 4)  # launcher + 3 ranks
        p.kill()
        p.wait()
        self.assertTrue(wait_gone(self.mark, 2), tagged_pids(self.mark))

    def test_sigint_reaches_the_ranks_and_the_launcher_exits_130(self):
        e = dict(os.environ, **self.env)
        p = subprocess.Popen([RUN, "-n", "2", "sleep", "100"], env=e, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 10
        while len(tagged_pids(self.mark)) < 3 and time.time() < deadline:
            time.sleep(0.05)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=WATCHDOG)
        self.assertEqual(p.returncode, 130, err)
        self.assertTrue(wait_gone(self.mark, 2))

    def test_wrong_token_is_rejected_and_the_job_completes(self):
        r = run([RUN, "-n", "2", sys.executable, os.path.join(SRC, "tests/integration/badtoken_rank.py"), ALLTOALL, "200"],
                env=self.env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("bad requests refused", r.stdout)
        self.assertIn("rejected a bootstrap request: wrong token", r.stderr)
        self.assertIn("frame length above the limit", r.stderr)
        self.assertEqual(r.stdout.count(" ok "), 2, r.stdout)

    def test_exported_variables_and_tagged_output(self):
        r = run([RUN, "-n", "3", "--tag-output", "-x", "FOO=bar", ALLTOALL, "10", "--print-env", "FOO"], env=self.env)
        self.assertEqual(r.returncode, 0, r.stderr)
        for rank in range(3):
            self.assertIn("[%d] rank %d FOO=bar" % (rank, rank), r.stdout)
        for line in r.stdout.strip().splitlines():
            self.assertRegex(line, r"^\[\d\] ")

    def test_bind_core_pins_each_rank(self):
        r = run([RUN, "-n", "2", "--bind", "core", "--tag-output", "sh", "-c", "grep Cpus_allowed_list /proc/self/status"])
        self.assertEqual(r.returncode, 0, r.stderr)
        lists = sorted(line.split()[-1] for line in r.stdout.splitlines())
        self.assertEqual(len(lists), 2)
        for l in lists:
            self.assertNotIn(",", l)
            self.assertNotIn("-", l)

    def test_bad_arguments_exit_2(self):
        for args in ([], ["-n", "0", "true"], ["-n", "2"], ["--bind", "socket", "-n", "1", "true"], ["--frobnicate"]):
            r = run([RUN] + args)
            self.assertEqual(r.returncode, 2, args)
            self.assertIn("usage", r.stderr)

    def test_bad_host_lists_are_refused_naming_what_is_wrong(self):
        with tempfile.TemporaryDirectory() as d:
            bad_file = os.path.join(d, "hosts")
            with open(bad_file, "w") as f:
                f.write("localhost slots=2 extra\n")
            for args, said in ((["-H", "localhost:0", "true"], "1 to 4096 slots"),
                               (["-H", "a,,b", "true"], "an empty host name"),
                               (["-H", "fd00::2:2", "true"], "an IPv6 address goes in brackets"),
                               (["-H", "[fd00::2]x", "true"], "an IPv6 address goes in brackets"),
                               (["-n", "3", "-H", "localhost:2", "true"], "more than the hosts' 2 slots"),
                               (["--hostfile", os.path.join(d, "missing"), "true"], "cannot read it"),
                               (["--hostfile", bad_file, "true"], "need NAME, NAME:SLOTS or NAME slots=SLOTS")):
                r = run([RUN] + args)
                self.assertEqual(r.returncode, 2, args)
                self.assertIn(said, r.stderr, args)

    def test_hosts_that_are_this_machine_run_here_with_their_local_ranks(self):
        # localhost and this host's name are this machine: no launch agent is used (one that
        # fails proves it), each host's ranks count their local rank from 0.
        with tempfile.TemporaryDirectory() as d:
            hostfile = os.path.join(d, "hosts")
            with open(hostfile, "w") as f:
                f.write("# three entries for this machine\nlocalhost slots=2\n%s:1\n[::1]:1\n" % socket.gethostname())
            r = run([RUN, "--hostfile", hostfile, "--launch-agent", "false", "--tag-output", "sh", "-c",
                     "echo local $SLUICE_LOCAL_RANK of $SLUICE_SIZE, $SLUICE_LOCAL_SIZE here; "
                     "case $SLUICE_BOOT_ADDR in tcp:*) echo tcp;; esac"])
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(sorted(l.split("] ")[1] for l in r.stdout.splitlines()),
                             ["local 0 of 4, 4 here", "local 0 of 4, 4 here", "local 0 of 4, 4 here",
                              "local 1 of 4, 4 here"])

    def test_a_job_on_one_host_opens_no_ucx_tcp_port(self):
        # Every rank here (SLUICE_LOCAL_SIZE = SLUICE_SIZE): UCX's TCP is left out and no port is
        # opened; with SLUICE_UCX_TCP=y, each rank's engine logs the ports UCX's TCP opened.
        for ucx_tcp, logged in (("auto", 0), ("y", 2)):
            r = run([RUN, "-n", "2", ALLTOALL, "300"], env=dict(self.env, SLUICE_UCX_TCP=ucx_tcp,
                                                                 SLUICE_LOG_LEVEL="info"))
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stdout.count(" ok "), 2, r.stdout)
            self.assertEqual(r.stderr.count("UCX's TCP transport listens on"), logged, ucx_tcp + ": " + r.stderr)

    def test_a_job_starts_while_another_process_holds_100_connections_to_its_service(self):
        # The ranks run "elsewhere" (a launch agent that runs the command here), so the service
        # listens on TCP as it does facing a network. Before any rank starts, another process
        # opens 100 idle connections to that port and holds them; the ranks must still get
        # their fences served, and none may die of SIGPIPE (status 141).
        with tempfile.TemporaryDirectory() as d:
            agent = os.path.join(d, "agent.sh")
            with open(agent, "w") as f:
                f.write('#!/bin/sh\nshift\nexec sh -c "$1"\n')  # AGENT HOST COMMAND: COMMAND, here
            ready = os.path.join(d, "held")
            holder = ("import os, socket, sys, time\n"
                      "host, port = sys.argv[1].rsplit(':', 1)\n"
                      "held = [socket.create_connection((host, int(port))) for _ in range(100)]\n"
                      "open(sys.argv[2], 'w').close()\n"
                      "time.sleep(20)\n")
            wrapper = os.path.join(d, "rank.sh")
            with open(wrapper, "w") as f:
                f.write('#!/bin/sh\n'
                        'if [ "$SLUICE_RANK" = 0 ]; then\n'
                        '  %s -c "%s" "${SLUICE_BOOT_ADDR#tcp:}" %s </dev/null >/dev/null 2>&1 &\n'
                        'fi\n'
                        'while [ ! -e %s ]; do sleep 0.05; done\n'
                        'exec "$@"\n' % (sys.executable, holder, ready, ready))
            os.chmod(agent, 0o755)
            os.chmod(wrapper, 0o755)
            r = run([RUN, "-H", "192.0.2.1:2", "--launch-agent", agent, "--boot-host", "127.0.0.1",
                     "--timeout", "60", wrapper, ALLTOALL, "100"], env=self.env)
            self.assertTrue(os.path.exists(ready), "the holder never held its connections: " + r.stderr)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        self.assertEqual(r.stdout.count(" ok "), 2, r.stdout)
        self.assertIn("too many connections without a token", r.stderr)

    def test_stats_prints_the_jobs_sums_and_extremes_of_every_counter(self):
        # Each rank prints its own counters at exit (SLUICE_STATS=1, tagged with its rank); the
        # launcher's table must add up to them exactly and name the ranks at the extremes.
        r = run([RUN, "-n", "3", "--stats", "--tag-output", ALLTOALL, "200"], env=dict(self.env, SLUICE_STATS="1"))
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        self.assertIn("sluice-run: counters of 3 of 3 ranks", r.stderr)
        table = check_stats_table(self, r.stderr, r.stderr, r"^\[(\d+)\] (.*)$", 3)
        # What the ranks did: 200 messages to each of the 2 others, and all of them arrived.
        self.assertGreaterEqual(table["am.msgs_sent"][0], 3 * 2 * 200)
        self.assertEqual(table["am.msgs_sent"][0], table["am.msgs_received"][0])

    def test_ping_example(self):
        r = run([RUN, "-n", "2", PING, "2000"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("round trips", r.stdout)
        # Alone or with three ranks: a clear refusal, not a crash.
        for cmd in ([PING, "10"], [RUN, "-n", "3", PING, "10"]):
            r = run(cmd)
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertIn("ping: run with two ranks", r.stderr)


class Blockstore(unittest.TestCase):
    def test_demo_in_one_process(self):
        r = run([BLOCKSTORE, "demo"], env={"SLUICE_LOG_LEVEL": "debug"})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("0 mismatches, 0 errors", r.stdout)
        # As the docs ask: one Context per process (one bootstrap), the server and the client
        # two engines of it.
        self.assertEqual(len(re.findall(r"SLUICE_BOOT=auto chose", r.stderr)), 1, r.stderr)
        self.assertEqual(re.findall(r"debug am: engine (\d+): rank", r.stderr), ["0", "1"])

    def test_server_and_client_processes_over_tcp_and_shared_memory(self):
        for tls in ("", "tcp"):
            env = dict(os.environ, SLUICE_TLS=tls)
            server = subprocess.Popen([BLOCKSTORE, "serve", "127.0.0.1:0"], env=env, stdout=subprocess.PIPE, text=True)
            try:
                line = server.stdout.readline()
                port = int(line.split()[-1])
                r = run([BLOCKSTORE, "check", "127.0.0.1:%d" % port, "22"], env={"SLUICE_TLS": tls})
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertIn("22 blocks", r.stdout)
            finally:
                server.kill()
                server.wait()


class LiveStats(unittest.TestCase):
    """SLUICE_STATS_TRIGGER / SLUICE_STATS_DEST on a running server and its client."""

    @staticmethod
    def lines(path):
        if not os.path.exists(path):
            return []
        with open(path) as f:
            return [json.loads(l) for l in f if l.strip()]

    def test_signal_timer_and_exit_lines_from_a_server_and_its_client(self):
        with tempfile.TemporaryDirectory() as d:
            env = dict(os.environ, SLUICE_STATS_TRIGGER="signal:USR1,timer:300ms",
                       SLUICE_STATS_DEST="file:" + os.path.join(d, "server-%h-%p.jsonl"))
            server = subprocess.Popen([BLOCKSTORE, "serve", "127.0.0.1:0"], env=env, stdout=subprocess.PIPE, text=True)
            try:
                port = int(server.stdout.readline().split()[-1])
                path = os.path.join(d, "server-%s-%d.jsonl" % (socket.gethostname(), server.pid))
                # 40 blocks: 80 calls (40 writes, 40 reads), a method's first call and one in 16 timed.
                r = run([BLOCKSTORE, "check", "127.0.0.1:%d" % port, "40"],
                        env={"SLUICE_STATS_TRIGGER": "exit", "SLUICE_STATS_DEST": "file:" + os.path.join(d, "client.jsonl")})
                self.assertEqual(r.returncode, 0, r.stderr)
                server.send_signal(signal.SIGUSR1)
                deadline = time.monotonic() + 10
                def seen(kind):
                    return sum(l["trigger"] == kind for l in self.lines(path))
                while (seen("signal") < 1 or seen("timer") < 3) and time.monotonic() < deadline:
                    time.sleep(0.05)
                lines = self.lines(path)
            finally:
                server.kill()
                server.wait()
                server.stdout.close()
            signalled = [l for l in lines if l["trigger"] == "signal"]
            self.assertEqual(len(signalled), 1, lines[-3:])
            timed = [l for l in lines if l["trigger"] == "timer"]
            self.assertGreaterEqual(len(timed), 3)
            self.assertEqual([l["time"] for l in timed], sorted(l["time"] for l in timed))
            s = signalled[0]
            self.assertEqual((s["pid"], s["listen_port"], s["host"]), (server.pid, port, socket.gethostname()))
            self.assertNotIn("rank", s)
            # 40 writes and 40 reads answered. The client has left: it is counted, not listed.
            self.assertGreaterEqual(s["counters"]["rpc.replies"], 80)
            self.assertEqual(s["peers"], [])
            self.assertEqual((s["peers_live"], s["peers_gone"]), (0, 1))
            # While it was connected, a timer line listed it with its rates.
            busy = [p for l in timed for p in l["peers"]]
            self.assertTrue(all(p["state"] != "dead" for p in busy), busy)
            for peer in busy:
                self.assertRegex(peer["peer"], r"^client 127\.0\.0\.1:\d+$")
                self.assertGreaterEqual(peer["msgs_per_s"], 0)
            client = self.lines(os.path.join(d, "client.jsonl"))
            self.assertEqual([l["trigger"] for l in client], ["exit"])
            # Per method, each side: its calls, none failed, 3 of 40 timed (the 1st, 17th, 33rd).
            for side, methods in (("server", s["methods"]), ("client", client[0]["methods"])):
                mine = [m for m in methods if m["side"] == side]
                self.assertGreaterEqual(len(mine), 2, methods)
                self.assertEqual(sum(m["calls"] for m in mine), s["counters"]["rpc.replies"], (side, methods))
                for m in mine:
                    self.assertEqual(m["errors"], 0, m)
                    if m["calls"] == 40:
                        self.assertEqual(m["timed"], 3, m)
                    self.assertTrue(0 < m["p50_us"] <= m["p90_us"] <= m["p99_us"] <= m["max_us"], m)
            cp = client[0]["peers"][0]
            self.assertGreaterEqual(cp["msgs_sent"], 80)
            self.assertGreater(cp["rtt_us"], 0)

    def test_rank_mode_lines_name_the_rank_and_every_counter(self):
        with tempfile.TemporaryDirectory() as d:
            r = run([RUN, "-n", "2", PING, "100"],
                    env=dict(os.environ, SLUICE_STATS_TRIGGER="exit", SLUICE_STATS="1",
                             SLUICE_STATS_DEST="file:" + os.path.join(d, "s.jsonl")))
            self.assertEqual(r.returncode, 0, r.stderr)
            lines = self.lines(os.path.join(d, "s.jsonl"))
            self.assertEqual(sorted(l["rank"] for l in lines), [0, 1])
            # The same counters as SLUICE_STATS prints, with the same values (one engine per rank).
            printed = re.findall(r"^((?:am|api|flow|rpc|peers|ctrl|wire|door|mem)\.\S+)\s+(\d+)$", r.stderr, re.M)
            self.assertEqual(len(printed), sum(len(l["counters"]) for l in lines))
            for l in lines:
                self.assertEqual(l["peers"][0]["peer"], "rank %d" % (1 - l["rank"]))
                self.assertGreaterEqual(l["peers"][0]["msgs_sent"], 100)

    def test_bad_values_are_refused_and_an_unwritable_file_falls_back_to_stderr(self):
        r = run([BLOCKSTORE, "demo"], env={"SLUICE_STATS_TRIGGER": "timer:1ms"})
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("SLUICE_STATS_TRIGGER=timer:1ms", r.stderr)
        self.assertIn("below 10ms", r.stderr)
        r = run([BLOCKSTORE, "demo"], env={"SLUICE_STATS_TRIGGER": "exit", "SLUICE_STATS_DEST": "file:/nonexistent/dir/s"})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("cannot open /nonexistent/dir/s", r.stderr)
        self.assertEqual(len([l for l in r.stderr.splitlines() if l.startswith('{"time"')]), 2, r.stderr)


class Mpirun(unittest.TestCase):
    def test_alltoall_under_mpirun_uses_pmix(self):
        env = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "SLUICE_LOG_LEVEL": "debug",
               "OMPI_MCA_btl_vader_single_copy_mechanism": "none", "OMPI_MCA_plm_rsh_agent": "false"}
        r = run(["mpirun", "-np", "4", "--oversubscribe", "--bind-to", "none", ALLTOALL, "500"], env=env)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(r.stdout.count(" ok "), 4, r.stdout)
        self.assertIn("SLUICE_BOOT=auto chose pmix", r.stderr)
        # PMIx says all four ranks are on this node: UCX's TCP is left out, no port opened.
        self.assertNotIn("UCX's TCP transport listens on", r.stderr)


class StatsTool(unittest.TestCase):
    """sluice-stats: the files of a job's exit lines, added up as sluice-run --stats does."""

    def test_the_sums_of_the_files_ranks_under_mpirun_wrote(self):
        # Each rank's own counters (SLUICE_STATS=1) in a file of its own: mpirun's --tag-output
        # interleaves pieces of the ranks' lines.
        with tempfile.TemporaryDirectory() as d, tempfile.TemporaryDirectory() as out:
            env = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                   "OMPI_MCA_btl_vader_single_copy_mechanism": "none", "OMPI_MCA_plm_rsh_agent": "false",
                   "SLUICE_STATS": "1"}
            r = run(["mpirun", "-np", "3", "--oversubscribe", "--bind-to", "none", "--output-filename", out,
                     "-x", "SLUICE_STATS_TRIGGER=exit", "-x", "SLUICE_STATS_DEST=file:%s/%%h-%%p.jsonl" % d,
                     ALLTOALL, "200"], env=env)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr[-3000:])
            own = ""
            for rank in range(3):
                with open(os.path.join(out, "1", "rank.%d" % rank, "stderr")) as f:
                    own += "".join("[%d] %s" % (rank, line) for line in f)
            files = sorted(os.path.join(d, f) for f in os.listdir(d))
            self.assertEqual(len(files), 3, files)  # one a process
            s = run([STATS] + files)
        self.assertEqual(s.returncode, 0, s.stderr)
        self.assertIn("sluice-stats: counters of 3 ranks (each rank's engines at exit), from 3 file(s):", s.stdout)
        table = check_stats_table(self, s.stdout, own, r"^\[(\d+)\] (.*)$", 3)
        self.assertGreaterEqual(table["am.msgs_sent"][0], 3 * 2 * 200)
        self.assertEqual(table["am.msgs_sent"][0], table["am.msgs_received"][0])

    def test_a_line_that_is_not_a_stats_line_is_named_by_its_file_and_line(self):
        good = '{"host": "h", "pid": 7, "rank": 0, "trigger": "exit", "counters": {"am.msgs_sent": 5}}\n'
        cases = [
            ('{"rank": 1, "trigger": "exit", "counters": {"am.msgs_sent": -1}}\n',
             "bad.jsonl:2: not a stats line: counter am.msgs_sent is not a whole number"),
            ('{"rank": 1, "trigger": "exit", "counters": {"am.msgs_sent": 1}\n', "bad.jsonl:2: not a stats line"),
            ('{"rank": 1, "trigger": "exit"}\n', 'bad.jsonl:2: not a stats line: no "counters" object'),
            ('{"rank": 1, "trigger": "exit", "counters": {"\\u001b[2J": 1}}\n',
             "bad.jsonl:2: not a stats line: a counter name that is not letters"),
            ("[" * 100000 + "\n", "bad.jsonl:2: not a stats line: an object expected at byte 1"),
            ('{"peers": ' + "[" * 100 + "]" * 100 + ', "counters": {}}\n', "nested more than 16 deep"),
            ("x" * (300 << 10) + "\n", "bad.jsonl:2: a line longer than 262144 bytes; not a stats line"),
            ('{"host": "h", "pid": 8, "rank": 0, "trigger": "exit", "counters": {}}\n',
             "bad.jsonl:2: rank 0 of process h:8, but %s:1 had rank 0 of process h:7: give the files of one job"),
        ]
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "bad.jsonl")
            for text, said in cases:
                with open(path, "w") as f:
                    f.write(good + text + good)
                r = run([STATS, path])
                self.assertEqual(r.returncode, 1, (said, r.stdout, r.stderr))
                self.assertIn(said.replace("%s", path), r.stderr)
                self.assertEqual(r.stdout, "", said)
            for args, said in (([os.path.join(d, "none")], "none: cannot open it: No such file or directory"),
                               ([d], "cannot read it: Is a directory")):
                r = run([STATS] + args)
                self.assertEqual(r.returncode, 1, r.stderr)
                self.assertIn(said, r.stderr)
        r = run([STATS])
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("usage: sluice-stats", r.stderr)


class FileBootstrap(unittest.TestCase):
    def test_two_processes_started_by_hand(self):
        with tempfile.TemporaryDirectory() as d:
            procs = []
            for rank in range(2):
                env = dict(os.environ, SLUICE_BOOT="file:" + d, SLUICE_RANK=str(rank), SLUICE_SIZE="2")
                procs.append(subprocess.Popen([ALLTOALL, "300"], env=env, stdout=subprocess.PIPE,
                                              stderr=subprocess.PIPE, text=True))
            outs = [p.communicate(timeout=WATCHDOG) for p in procs]
            for p, (out, err) in zip(procs, outs):
                self.assertEqual(p.returncode, 0, err)
                self.assertIn(" ok ", out)

    def test_missing_rank_is_reported_by_name(self):
        with tempfile.TemporaryDirectory() as d:
            env = {"SLUICE_BOOT": "file:" + d, "SLUICE_RANK": "0", "SLUICE_SIZE": "2", "SLUICE_CONNECT_TIMEOUT": "1s"}
            r = run([ALLTOALL, "10"], env=env)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("rank 1 did not reach fence", r.stderr)


class SluiceInfo(unittest.TestCase):
    def test_lists_every_variable_with_docs(self):
        r = run([INFO, "-c", "-f"])
        self.assertEqual(r.returncode, 0, r.stderr)
        for name in ("SLUICE_LOG_LEVEL", "SLUICE_STATS", "SLUICE_EAGER_MAX", "SLUICE_RNDV", "SLUICE_CREDITS",
                     "SLUICE_RX_POSTED", "SLUICE_SEND_POOL_MAX", "SLUICE_RECV_POOL_MAX", "SLUICE_POOL_CHUNK",
                     "SLUICE_HUGEPAGES", "SLUICE_NUMA", "SLUICE_SEND_QUEUE_MAX", "SLUICE_RPC_WINDOW",
                     "SLUICE_PEER_TIMEOUT", "SLUICE_HEARTBEAT", "SLUICE_CONNECT_TIMEOUT", "SLUICE_TLS", "SLUICE_BOOT",
                     "SLUICE_AUTH", "SLUICE_AUTH_KEY_FILE", "SLUICE_HANDSHAKE_TIMEOUT", "SLUICE_HANDSHAKE_MAX"):
            self.assertIn("\n%s=" % name, "\n" + r.stdout)
        self.assertIn("# default:", r.stdout)

    def test_current_values_are_shown(self):
        r = run([INFO, "-c"], env={"SLUICE_CREDITS": "48"})
        self.assertIn("SLUICE_CREDITS=48", r.stdout)

    def test_bad_value_exits_1_naming_it(self):
        r = run([INFO, "-c"], env={"SLUICE_SEND_POOL_MAX": "12Q"})
        self.assertEqual(r.returncode, 1)
        self.assertIn("SLUICE_SEND_POOL_MAX=12Q", r.stderr)

    def test_check_refuses_what_context_create_refuses_with_the_same_words(self):
        # -c runs Context::create's own checks: SLUICE_TLS's names, the NUMA node, the key file.
        topo = run([INFO, "-t"]).stdout
        self.assertNotIn("node 7:", topo, "this test needs a machine without a NUMA node 7")
        with tempfile.TemporaryDirectory() as d:
            good, open_key, missing = (os.path.join(d, n) for n in ("good", "open", "missing"))
            self.assertEqual(run([INFO, "--new-key", good]).returncode, 0)
            with open(open_key, "w") as f:
                f.write("a secret that others may read\n")
            os.chmod(open_key, 0o644)
            self.assertEqual(run([INFO, "-c"], env={"SLUICE_AUTH_KEY_FILE": good}).returncode, 0)
            for env, words in (({"SLUICE_NUMA": "7"}, "SLUICE_NUMA=7: numa node 7 does not exist"),
                               ({"SLUICE_AUTH_KEY_FILE": missing}, "SLUICE_AUTH_KEY_FILE=%s: cannot open" % missing),
                               ({"SLUICE_AUTH_KEY_FILE": open_key},
                                "SLUICE_AUTH_KEY_FILE=%s: mode 0644 lets group or others read" % open_key),
                               ({"SLUICE_TLS": "foo"}, "SLUICE_TLS=foo: 'foo' is not a UCX transport or alias; valid: "
                                "transports self, tcp, sysv, posix"),
                               ({"SLUICE_TLS": "cma"}, "SLUICE_TLS=cma: leaves processes on the same host without "
                                "shared memory")):
                r = run([INFO, "-c"], env=env)
                self.assertEqual(r.returncode, 1, env)
                self.assertIn("sluice-info: configuration error: " + words, r.stderr)
                self.assertEqual(r.stdout, "")
                r = run([RUN, "-n", "1", ALLTOALL, "10"], env=env)
                self.assertNotEqual(r.returncode, 0, env)
                self.assertIn(words, r.stderr)
                self.assertNotIn("No such device", r.stderr)

    def test_bad_arguments_exit_2(self):
        r = run([INFO, "--nope"])
        self.assertEqual(r.returncode, 2)
        self.assertEqual(run([INFO, "--new-key"]).returncode, 2)

    def test_new_key_is_written_private_and_never_over_a_file(self):
        with tempfile.TemporaryDirectory() as d:
            key = os.path.join(d, "key")
            r = run([INFO, "--new-key", key])
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("SLUICE_AUTH_KEY_FILE=" + key, r.stdout)
            self.assertEqual(os.stat(key).st_mode & 0o777, 0o600)
            with open(key) as f:
                first = f.read()
            self.assertRegex(first, r"^[0-9a-f]{64}\n$")
            r = run([INFO, "--new-key", key])
            self.assertEqual(r.returncode, 1)
            self.assertIn("cannot create", r.stderr)
            with open(key) as f:
                self.assertEqual(f.read(), first, "the existing key is left alone")
            r = run([INFO, "-c"], env={"SLUICE_AUTH": "required"})
            self.assertEqual(r.returncode, 1)
            self.assertIn("SLUICE_AUTH_KEY_FILE", r.stderr)

    def test_topology_and_devices(self):
        r = run([INFO, "-t", "-d", "-v"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("numa nodes:", r.stdout)
        self.assertIn("rdma devices:", r.stdout)
        self.assertIn("UCX", r.stdout)

    def test_devices_name_the_ucx_settings_sluice_makes_and_leave_the_users_alone(self):
        # architecture.md (Failure and closing): the shared-memory FIFO follows SLUICE_CREDITS unless UCX's is set.
        r = run([INFO, "-d"])
        self.assertIn("UCX_{SYSV,POSIX}_FIFO_SIZE=256", r.stdout)
        r = run([INFO, "-d"], env={"SLUICE_CREDITS": "64"})
        self.assertIn("UCX_{SYSV,POSIX}_FIFO_SIZE=512", r.stdout)
        for name in ("UCX_MM_FIFO_SIZE", "UCX_SYSV_FIFO_SIZE", "UCX_POSIX_FIFO_SIZE"):
            r = run([INFO, "-d"], env={name: "64"})
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("UCX_CMA_MEMORY_INVALIDATE=y", r.stdout)
            self.assertNotIn("FIFO_SIZE", r.stdout, name + " set by the user")
        # Over TCP alone, no shared-memory setting; only the address format the address check
        # knows (UCX_UNIFIED_MODE=n), which every context asks for.
        r = run([INFO, "-d"], env={"SLUICE_TLS": "tcp"})
        self.assertIn("# set by Sluice: UCX_UNIFIED_MODE=n\n", r.stdout)
        # UCX's aliases get the settings of the transports they stand for (shm: sysv, posix, cma).
        for tls in ("shm", "sm,tcp"):
            r = run([INFO, "-d"], env={"SLUICE_TLS": tls})
            self.assertIn("UCX_{SYSV,POSIX}_ERROR_HANDLING=y", r.stdout, tls)
            self.assertIn("UCX_CMA_MEMORY_INVALIDATE=y", r.stdout, tls)

    def test_every_counter_is_documented(self):
        # Every counter an engine prints (SLUICE_STATS=1) in rank mode (ping) and client/server
        # mode (blockstore demo) has a row in docs/stats.md (DIR and CLASS stand for the pool
        # direction and class there), and every row names a counter that exists.
        with open(os.path.join(SRC, "docs/stats.md")) as f:
            documented = set(re.findall(r"`((?:am|api|flow|rpc|peers|ctrl|wire|door|mem)\.[A-Za-z_.]+)`", f.read()))
        patterns = [re.compile("^" + re.escape(d).replace("DIR", "(send|recv)").replace("CLASS", "[^.]+") + "$")
                    for d in documented]
        seen = set()
        for cmd in ([RUN, "-n", "2", PING, "100"], [BLOCKSTORE, "demo"]):
            r = run(cmd, env=dict(os.environ, SLUICE_STATS="1"))
            self.assertEqual(r.returncode, 0, r.stderr)
            seen |= set(re.findall(r"^((?:am|api|flow|rpc|peers|ctrl|wire|door|mem)\.\S+)\s+\d+$", r.stderr, re.M))
        self.assertGreater(len(seen), 50)
        undocumented = sorted(n for n in seen if not any(p.match(n) for p in patterns))
        self.assertEqual(undocumented, [], "counters missing from docs/stats.md")
        stale = sorted(d for d, p in zip(documented, patterns) if not any(p.match(n) for n in seen))
        self.assertEqual(stale, [], "docs/stats.md names counters no engine keeps")

    def test_docs_configuration_matches_markdown_output(self):
        r = run([INFO, "-c", "--markdown"], env={k: "" for k in []})
        with open(os.path.join(SRC, "docs/configuration.md")) as f:
            doc = f.read()
        self.assertIn(r.stdout.strip(), doc,
                      "docs/configuration.md is out of date: regenerate the table with sluice-info -c --markdown")


if __name__ == "__main__":
    unittest.main(verbosity=2)
