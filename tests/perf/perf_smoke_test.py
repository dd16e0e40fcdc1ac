#!/usr/bin/env python3
"""perf-smoke: every sluice-perf test runs briefly under sluice-run and prints well-formed CSV
with the documented columns, in rank mode and in client/server mode (-m cs, under sluice-run and
as two processes started apart); bad flags give a usage message and exit 2. No timing checks."""
import csv
import io
import json
import os
import re
import subprocess
import tempfile
import unittest

BUILD = os.environ.get("TEST_BUILD_DIR", os.path.join(os.path.dirname(__file__), "../../build"))
RUN = os.path.join(BUILD, "apps/sluice-run")
PERF = os.path.join(BUILD, "perf/sluice-perf")
COMPARE = os.path.join(os.path.dirname(__file__), "../../scripts/compare")
COLUMNS = ["test", "size", "iters", "window", "lat_p50_us", "lat_p99_us", "lat_avg_us", "bw_MBps", "rate_per_s",
           "baseline", "baseline_lat_p50_us", "baseline_bw_MBps", "baseline_rate_per_s", "ratio", "mode", "peers", "busy",
           "fairness", "recv_hwm_ratio", "connect_s", "server_idle_cpu_pct"]
CROWD = COLUMNS[-6:]
POINT_TO_POINT = ["am_lat", "am_bw", "rpc_lat", "rpc_rate", "read", "write", "bulk_bw"]
ALL_TESTS = POINT_TO_POINT + ["am_submit", "mixed", "fanin", "crowd"]


def perf(ranks, *args, env=None):
    r = subprocess.run([RUN, "-n", str(ranks), "--timeout", "240", PERF] + list(args), capture_output=True, text=True,
                       timeout=300, env=dict(os.environ, **(env or {})))
    return r


class PerfSmoke(unittest.TestCase):
    def check_csv(self, out, tests, mode="rank"):
        rows = list(csv.DictReader(io.StringIO(out)))
        self.assertEqual(list(rows[0].keys()), COLUMNS)
        self.assertEqual(sorted({r["test"] for r in rows}), sorted(tests))
        for r in rows:
            int(r["size"]), int(r["iters"]), int(r["window"])
            self.assertEqual(r["mode"], mode, r)
            if r["test"] != "crowd":
                self.assertEqual([r[c] for c in CROWD], [""] * len(CROWD), r)
        return rows

    def test_point_to_point_tests_with_each_baseline(self):
        tests = POINT_TO_POINT
        for baseline in ("ucx", "bounce", "none"):
            r = perf(2, "-t", ",".join(tests), "-s", "8,64K", "-n", "200", "-w", "10", "-r", "1", "--baseline", baseline,
                     "--format", "csv")
            self.assertEqual(r.returncode, 0, r.stderr)
            rows = self.check_csv(r.stdout, tests)
            for row in rows:
                self.assertEqual(row["baseline"], baseline)
                if baseline != "none":
                    self.assertNotEqual(row["ratio"], "", row)
                    float(row["ratio"])
                if row["test"].endswith("_lat") or row["test"] in ("read", "write"):
                    self.assertGreater(float(row["lat_p50_us"]), 0)

    def test_submit_from_producer_threads_against_the_engine_thread_alone(self):
        # am_submit: its baseline is the engine thread sending alone, whatever --baseline says;
        # both rates and their ratio are printed. In the table, the note names the producers.
        r = perf(2, "-t", "am_submit", "-s", "8,64K", "-n", "2000", "-w", "100", "-r", "1", "--producers", "3",
                 "--baseline", "ucx", "--format", "csv")
        self.assertEqual(r.returncode, 0, r.stderr)
        for row in self.check_csv(r.stdout, ["am_submit"]):
            self.assertEqual(row["baseline"], "engine", row)
            self.assertGreater(float(row["rate_per_s"]), 0, row)
            self.assertGreater(float(row["baseline_rate_per_s"]), 0, row)
            self.assertAlmostEqual(float(row["ratio"]), float(row["rate_per_s"]) / float(row["baseline_rate_per_s"]),
                                   delta=0.01 * float(row["ratio"]) + 0.001)
        r = perf(2, "-m", "cs", "-t", "am_submit", "-n", "1000", "-r", "1", "--producers", "1")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("1 producer thread through submit(); baseline: the engine thread sending alone", r.stdout)

    def test_storage_patterns_with_copying_replies(self):
        # read and write, and rpc_lat, through reply_copy instead of the zero-copy replies.
        tests = ["rpc_lat", "read", "write"]
        r = perf(2, "-t", ",".join(tests), "-s", "8,64K,1M", "-n", "50", "-w", "5", "-r", "1", "--baseline", "ucx",
                 "--rpc", "copy", "--format", "csv")
        self.assertEqual(r.returncode, 0, r.stderr)
        for row in self.check_csv(r.stdout, tests):
            self.assertGreater(float(row["lat_p50_us"]), 0, row)
            self.assertGreater(float(row["baseline_lat_p50_us"]), 0, row)

    def test_help_describes_every_test_and_flag(self):
        r = subprocess.run([PERF, "--help"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        for word in ("am_lat", "am_bw", "am_submit", "--producers", "rpc_lat", "rpc_rate", "read", "write", "bulk_bw", "mixed", "fanin", "-t", "-s",
                     "-n", "-w", "-W", "-r", "--baseline", "--rpc", "--offset", "--format", "--stats", "below 1 is better",
                     "-m, --mode", "--server", "--listen", "--connect", "cs mode (client/server", "--mpirun",
                     "--mpi-timeout", "MPI baseline (--baseline mpi", "--peers", "--busy", "--per-process", "--idle-poll", "--idle-calls", "--seconds",
                     "crowd (-t crowd"):
            self.assertIn(word, r.stdout)

    def test_every_test_of_the_table_is_taken_by_t_and_described_in_help(self):
        # An unknown name is refused with the table's names; each of them is taken by -t (which
        # is parsed before --help, so a refused one exits 2), has its entry in --help's tests and
        # its line in the ratio section.
        r = subprocess.run([PERF, "-t", "am_lat,nope"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2, r.stderr)
        m = re.search(r"sluice-perf: -t nope: no such test; the tests are (.*), or all\n", r.stderr)
        self.assertIsNotNone(m, r.stderr)
        names = m.group(1).split(", ")
        self.assertEqual(sorted(names), sorted(ALL_TESTS))
        help_text = subprocess.run([PERF, "--help"], capture_output=True, text=True).stdout
        tests_section = help_text.split("\ntests (")[1].split("\n\n")[0]
        self.assertEqual(re.findall(r"^  (\w+) +\S", tests_section, re.M), names)
        ratio_section = help_text.split("\nratio (")[1].split("\n\n")[0]
        ratio_names = re.findall(r"(\w+)[:,]", ratio_section)
        for name in names:
            self.assertIn(name, ratio_names)
            r = subprocess.run([PERF, "-t", name, "--help"], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, (name, r.stderr))
        r = subprocess.run([PERF, "-t", "all", "--help"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_rows_appear_as_they_are_measured(self):
        # The 8-byte row is out while the 16 MiB one (a second or more) is still being measured.
        p = subprocess.Popen([RUN, "-n", "2", PERF, "-t", "am_lat", "-s", "8,16M", "-n", "100", "-r", "3",
                              "--format", "csv"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        header = p.stdout.readline()
        first = p.stdout.readline()
        still_running = p.poll() is None
        out, err = p.communicate(timeout=300)
        self.assertEqual(p.returncode, 0, err)
        self.assertTrue(header.startswith("test,size"), header)
        self.assertTrue(first.startswith("am_lat,8,"), first)
        self.assertTrue(out.startswith("am_lat,16777216,"), out)
        self.assertTrue(still_running, "the first row came only when the run ended")

    def test_nothing_is_left_in_ucx_when_the_engines_close(self):
        # The raw baseline's run keeps both engines unprogressed; their heartbeats (every 100 ms
        # here) then cross with the goodbyes, and the rank that closes first must still receive
        # and drop what its peer sent before it knew: UCX warns about each message left unmatched
        # when a worker goes ("unexpected tag-receive descriptor ... was not matched").
        r = perf(2, "-t", "bulk_bw", "-s", "16M", "-n", "100", "-r", "1", "--baseline", "ucx",
                 env={"SLUICE_HEARTBEAT": "100ms"})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("was not matched", r.stdout + r.stderr)

    def test_mixed_and_fanin_with_three_ranks(self):
        r = perf(3, "-t", "mixed,fanin", "-n", "300", "-r", "1", "--format", "csv", "--stats")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("# sluice stats", r.stdout)
        rows = self.check_csv(r.stdout.split("\n\n# sluice stats")[0], ["mixed", "fanin"])
        fanin = [x for x in rows if x["test"] == "fanin"][0]
        self.assertLessEqual(float(fanin["ratio"]), 1.0, "receive high-water mark within the budget")

    def test_fanin_holds_sluice_senders_to_their_credits_and_reports_raw_ucx_beside(self):
        # Rank 0 leaves what arrives unfinished for 200 ms: Sluice's senders stop at their
        # credits; the raw UCX senders are not stopped by anything (how many of their messages
        # arrive in that time is the machine's business, so only the report's form is checked).
        r = perf(3, "-t", "fanin", "-n", "2000", "-r", "1", "--baseline", "ucx", env={"SLUICE_CREDITS": "4"})
        self.assertEqual(r.returncode, 0, r.stderr)
        row = [line for line in r.stdout.splitlines() if line.startswith("fanin")][0]
        m = re.search(r"receive memory peaked at \S+ of its \S+ budget; (\d+) messages \(\S+\) were waiting when rank 0 "
                      r"caught up \(raw UCX, no flow control: (\d+) messages", row)
        self.assertIsNotNone(m, row)
        self.assertLessEqual(int(m.group(1)), 2 * 4, "two senders with 4 credits each")
        self.assertLessEqual(int(m.group(2)), 2 * 2200, "the raw receiver counts what was sent at most")

    def test_json_and_table(self):
        r = perf(2, "-t", "am_lat", "-n", "100", "-r", "1", "--format", "json")
        self.assertEqual(r.returncode, 0, r.stderr)
        data = json.loads(r.stdout)
        self.assertEqual(set(data[0].keys()), set(COLUMNS))
        self.assertEqual(data[0]["mode"], "rank")
        r = perf(2, "-t", "am_lat", "-n", "100", "-r", "1")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("ratio", r.stdout.splitlines()[0])
        self.assertIn("# mode: rank (rank 0 against rank 1)", r.stdout)

    def test_client_server_mode_under_sluice_run(self):
        # Rank 0 listens on 127.0.0.1, port 0, and publishes the address through the bootstrap;
        # rank 1 connects and drives. The bounce baseline's engines connect on a port of their own.
        tests = POINT_TO_POINT + ["fanin"]
        r = perf(2, "-m", "cs", "-t", ",".join(tests), "-s", "8,64K", "-n", "100", "-w", "5", "-r", "1", "--baseline",
                 "bounce", "--format", "csv")
        self.assertEqual(r.returncode, 0, r.stderr)
        for row in self.check_csv(r.stdout, tests, mode="cs"):
            self.assertEqual(row["baseline"], "budget" if row["test"] == "fanin" else "bounce", row)
            self.assertNotEqual(row["ratio"], "", row)
            if row["test"].endswith("_lat") or row["test"] in ("read", "write"):
                self.assertGreater(float(row["lat_p50_us"]), 0, row)
        # The raw UCX baseline still finds its peer through the launcher; the table names the mode.
        r = perf(2, "-m", "cs", "-t", "am_lat,rpc_rate", "-n", "100", "-r", "1", "--baseline", "ucx")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("# mode: cs (a client against the server at 127.0.0.1:", r.stdout)
        rows = [line.split() for line in r.stdout.splitlines() if line.startswith(("am_lat", "rpc_rate"))]
        self.assertEqual([row[0] for row in rows], ["am_lat", "rpc_rate"], r.stdout)
        self.assertEqual([row[-1] for row in rows], ["cs", "cs"], r.stdout)

    def test_client_server_mode_over_the_stream_transport(self):
        # SLUICE_CS_TRANSPORT=stream: the client's peers take Sluice's own TCP transport even on
        # one host; both engines (the bounce baseline's too) connect and every row comes out.
        tests = ["am_lat", "rpc_rate", "bulk_bw"]
        r = perf(2, "-m", "cs", "-t", ",".join(tests), "-s", "8,64K", "-n", "50", "-w", "5", "-r", "1", "--baseline",
                 "bounce", "--format", "csv", env={"SLUICE_CS_TRANSPORT": "stream"})
        self.assertEqual(r.returncode, 0, r.stderr)
        for row in self.check_csv(r.stdout, tests, mode="cs"):
            self.assertNotEqual(row["ratio"], "", row)

    def test_client_server_mode_without_a_launcher(self):
        # A server started alone prints where it listens; a client started apart connects, tells it
        # the settings in its hello and drives; both exit 0. With a key file, both prove it.
        with tempfile.TemporaryDirectory() as d:
            key = os.path.join(d, "key")
            with open(key, "wb") as f:
                f.write(os.urandom(32))
            os.chmod(key, 0o600)
            env = dict(os.environ, SLUICE_AUTH_KEY_FILE=key)
            server = subprocess.Popen([PERF, "-m", "cs", "--server", "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, env=env)
            try:
                line = server.stderr.readline()
                m = re.search(r"listening on (\S+:\d+)", line)
                self.assertIsNotNone(m, line)
                tests = ["am_lat", "rpc_rate", "bulk_bw"]
                r = subprocess.run([PERF, "-m", "cs", "--connect", m.group(1), "-t", ",".join(tests), "-s", "8,1M", "-n",
                                    "100", "-w", "5", "-r", "1", "--rpc", "copy", "--format", "csv"], capture_output=True,
                                   text=True, timeout=120, env=env)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.check_csv(r.stdout, tests, mode="cs")
                _, err = server.communicate(timeout=60)
                self.assertEqual(server.returncode, 0, err)
            finally:
                if server.poll() is None:
                    server.kill()
                    server.wait()

    def test_compare_script_writes_every_source(self):
        # scripts/compare: sluice-perf against both baselines, and ucx_perftest's tag and
        # active-message tests, into one CSV.
        with tempfile.TemporaryDirectory() as out:
            r = subprocess.run([COMPARE, "--sizes", "8", "--repeats", "1", "--iters", "500", "--out", out, "--build",
                                BUILD], capture_output=True, text=True, timeout=600)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(os.path.join(out, "compare.csv")) as f:
                rows = list(csv.DictReader(f))
        sources = {(x["source"], x["test"]) for x in rows}
        for source in ("sluice", "ucx", "bounce", "ucx_perftest", "ucx_perftest am"):
            self.assertIn((source, "am_lat"), sources)
            self.assertIn((source, "bulk_bw"), sources)
        for x in rows:
            if x["test"] == "am_lat":
                self.assertGreater(float(x["lat_us"]), 0, x)

    def test_crowd_runs_its_own_server_and_clients(self):
        # -t crowd, without a launcher: a server, 20 idle clients in two processes, and the busy
        # ones, 1 then 2 of them, in two rounds (the idle clients leave and come back); a row per K
        # with sane fields.
        r = subprocess.run([PERF, "-t", "crowd", "--peers", "20", "--per-process", "10", "--busy", "1,2", "--seconds",
                            "1", "-r", "2", "--format", "csv"], capture_output=True, text=True, timeout=240)
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = self.check_csv(r.stdout, ["crowd"], mode="cs")
        self.assertEqual([(x["peers"], x["busy"]) for x in rows], [("20", "1"), ("20", "2")])
        for x in rows:
            self.assertEqual((x["baseline"], x["size"], x["window"]), ("solo", "8", "32"), x)
            rate, solo = float(x["rate_per_s"]), float(x["baseline_rate_per_s"])
            self.assertGreater(rate, 0, x)
            self.assertGreater(solo, 0, x)
            self.assertGreater(float(x["ratio"]), 0, x)  # the median of the rounds' ratios
            self.assertGreater(float(x["lat_p50_us"]), 0, x)
            self.assertTrue(0 < float(x["fairness"]) <= 1.0001, x)
            self.assertTrue(0 < float(x["recv_hwm_ratio"]) <= 1, x)
            self.assertGreater(float(x["connect_s"]), 0, x)
            self.assertGreaterEqual(float(x["server_idle_cpu_pct"]), 0, x)
        self.assertEqual(rows[0]["fairness"], "1.0000", "one busy client is fair to itself")
        # JSON carries the same columns; with --idle-poll 0 each idle engine has a thread, and with
        # --connects all the two processes' engines connect at once (each a thread of its own).
        r = subprocess.run([PERF, "-t", "crowd", "--peers", "5", "--per-process", "3", "--busy", "1", "--seconds", "1",
                            "-r", "1", "--idle-poll", "0", "--connects", "all", "--format", "json"], capture_output=True,
                           text=True, timeout=240)
        self.assertEqual(r.returncode, 0, r.stderr)
        data = json.loads(r.stdout)
        self.assertEqual(set(data[0].keys()), set(COLUMNS))
        self.assertEqual((data[0]["peers"], data[0]["busy"], data[0]["fairness"]), (5, 1, 1.0))
        self.assertGreater(data[0]["connect_s"], 0)
        # The table's note says how they connected, that none failed and that all were still alive.
        r = subprocess.run([PERF, "-t", "crowd", "--peers", "4", "--per-process", "2", "--busy", "1", "--seconds", "1",
                            "-r", "1", "--connects", "all"], capture_output=True, text=True, timeout=240)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("4 connects at once in", r.stdout)
        self.assertIn(", 0 failed)", r.stdout)
        self.assertIn("4 of 4 idle still alive", r.stdout)
        # The baseline is the mean of the solo runs before the idle clients connect and after
        # they have gone (one round: no median in between).
        row = next(line for line in r.stdout.splitlines() if line.startswith("crowd "))
        solo = re.search(r"of solo \((\d+) before, (\d+) after\)", row)
        self.assertIsNotNone(solo, row)
        before, after = int(solo[1]), int(solo[2])
        self.assertTrue(before > 0 and after > 0, row)
        baseline = float(row.split("|")[2].split()[-1])  # the baseline's rate/s
        self.assertAlmostEqual(baseline, (before + after) / 2, delta=1, msg=row)

    def test_bad_flags_exit_2_with_usage(self):
        for args in (["-t", "nope"], ["-s", "12Q"], ["--baseline", "mpich"], ["--format", "xml"], ["-n", "0"], ["--what"],
                     ["-m", "tcp"], ["--producers", "0"], ["--producers", "65"], ["--server"], ["-m", "cs", "--connect", "nohost"],
                     ["-m", "cs", "--server", "--connect", "127.0.0.1:1"], ["--peers", "5"], ["-t", "crowd,am_lat"],
                     ["-t", "crowd", "--busy", "0"], ["-t", "crowd", "--busy", "65"], ["-t", "crowd", "--baseline", "ucx"],
                     ["--connects", "all"], ["-t", "crowd", "--connects", "some"], ["--idle-calls", "3"],
                     ["-t", "crowd", "--idle-calls", "3", "--idle-poll", "0"], ["-t", "crowd", "--idle-calls", "-1"]):
            r = perf(2, *args)
            self.assertEqual(r.returncode, 2, (args, r.stderr))
            self.assertIn("usage", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
