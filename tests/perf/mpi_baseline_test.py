#!/usr/bin/env python3
"""perf-mpi: sluice-perf --baseline mpi under sluice-run: a row per Open MPI pml (ob1 and ucx) with
figures and a finite ratio; a pml that cannot run (an mpirun that refuses it, one that hangs, none
at all) is named in its row and on stderr while the other pml and Sluice still report; bad usage
exits 2. Short runs: no timing checks."""
import csv
import io
import math
import os
import stat
import subprocess
import tempfile
import time
import unittest

BUILD = os.environ.get("TEST_BUILD_DIR", os.path.join(os.path.dirname(__file__), "../../build"))
RUN = os.path.join(BUILD, "apps/sluice-run")
PERF = os.path.join(BUILD, "perf/sluice-perf")
SHORT = ["-s", "8", "-n", "500", "-w", "50"]


def perf(*args, timeout=240):
    return subprocess.run([RUN, "-n", "2", "--bind", "core", "--timeout", str(timeout), PERF] + list(args),
                          capture_output=True, text=True, timeout=timeout + 60)


def fake_mpirun(directory, ucx_part):
    # An mpirun that does `ucx_part` (shell) when asked for pml ucx, and is the real one otherwise;
    # each call is logged.
    path = os.path.join(directory, "mpirun")
    log = os.path.join(directory, "calls")
    with open(path, "w") as f:
        f.write(f'#!/bin/sh\necho "$*" >> {log}\ncase "$*" in *"pml ucx"*) {ucx_part};; esac\nexec mpirun "$@"\n')
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
    return path, log


def rows_of(out):
    return list(csv.DictReader(io.StringIO(out)))


class MpiBaseline(unittest.TestCase):
    def test_a_row_per_pml_with_figures_and_ratios(self):
        r = perf("-t", "am_lat,am_bw", *SHORT, "-r", "2", "--baseline", "mpi", "--format", "csv")
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = rows_of(r.stdout)
        self.assertEqual([(x["test"], x["baseline"]) for x in rows],
                         [("am_lat", "mpi-ob1"), ("am_lat", "mpi-ucx"), ("am_bw", "mpi-ob1"), ("am_bw", "mpi-ucx")],
                         r.stdout + r.stderr)
        for x in rows:
            ratio = float(x["ratio"])
            self.assertTrue(math.isfinite(ratio) and ratio > 0, x)
            if x["test"] == "am_lat":  # one-way latency, as Sluice's: the ratio is theirs
                sluice, base = float(x["lat_p50_us"]), float(x["baseline_lat_p50_us"])
            else:  # 8 bytes: the message rate
                sluice, base = float(x["rate_per_s"]), float(x["baseline_rate_per_s"])
            self.assertGreater(base, 0, x)
            self.assertAlmostEqual(ratio, sluice / base, delta=0.01 * ratio + 0.001)
        self.assertNotIn("did not run", r.stderr)

    def test_a_pml_that_cannot_run_says_why_and_the_other_reports(self):
        with tempfile.TemporaryDirectory() as d:
            mpirun, log = fake_mpirun(d, 'echo "-----"; echo "fake mpirun: no pml ucx here" >&2; exit 1')
            r = perf("-t", "am_lat,rpc_lat", *SHORT, "-r", "2", "--baseline", "mpi", "--mpirun", mpirun)
            with open(log) as f:
                calls = f.read().splitlines()
        self.assertEqual(r.returncode, 0, r.stderr)
        why = f"pml ucx did not run: fake mpirun: no pml ucx here ({mpirun} exit status 1)"
        lines = [x for x in r.stdout.splitlines() if x.startswith(("am_lat", "rpc_lat"))]
        self.assertEqual(len(lines), 4, r.stdout)
        for line in lines:
            if " mpi-ucx " in line:
                self.assertTrue(line.endswith("rank  " + why), line)
            else:
                self.assertIn(" mpi-ob1 ", line)
                self.assertGreater(float(line.split("|")[3].split()[0]), 0, line)  # the ratio
        self.assertIn("sluice-perf: " + why, r.stderr)
        # Refused once, not asked again; ob1 ran every repetition of both rows.
        self.assertEqual(sum("pml ucx" in c for c in calls), 1, calls)
        self.assertEqual(sum("pml ob1" in c for c in calls), 4, calls)

    def test_a_job_that_does_not_finish_is_killed(self):
        with tempfile.TemporaryDirectory() as d:
            pid_file = os.path.join(d, "pid")
            mpirun, _ = fake_mpirun(d, f"echo $$ > {pid_file}; exec sleep 1000")
            started = time.monotonic()
            r = perf("-t", "am_lat", *SHORT, "-r", "1", "--baseline", "mpi", "--mpirun", mpirun, "--mpi-timeout", "2",
                     "--format", "csv")
            took = time.monotonic() - started
            with open(pid_file) as f:
                pid = int(f.read())
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertLess(took, 30)
        self.assertIn("sluice-perf: pml ucx did not finish within 2 s (--mpi-timeout): killed", r.stderr)
        rows = rows_of(r.stdout)
        self.assertEqual([x["baseline"] for x in rows], ["mpi-ob1", "mpi-ucx"])
        self.assertNotEqual(rows[0]["ratio"], "", rows)
        self.assertEqual(rows[1]["ratio"], "", rows)
        self.assertGreater(float(rows[1]["lat_p50_us"]), 0, "Sluice's figures are there")
        time.sleep(0.5)  # the orphan's reaping
        try:
            with open(f"/proc/{pid}/stat") as f:
                self.assertEqual(f.read().split(") ")[1][0], "Z", "the hanging job was killed")
        except FileNotFoundError:
            pass

    def test_no_mpirun(self):
        r = perf("-t", "am_lat", *SHORT, "-r", "1", "--baseline", "mpi", "--mpirun", "/nonexistent/mpirun",
                 "--format", "csv")
        self.assertEqual(r.returncode, 0, r.stderr)
        for pml in ("ob1", "ucx"):
            self.assertIn(f"sluice-perf: pml {pml} did not run: /nonexistent/mpirun not found", r.stderr)
        rows = rows_of(r.stdout)
        self.assertEqual([x["ratio"] for x in rows], ["", ""], rows)
        self.assertGreater(float(rows[0]["lat_p50_us"]), 0, rows)

    def test_bad_usage_exits_2(self):
        for args, said in ((["-m", "cs", "--baseline", "mpi"], "--baseline mpi runs in rank mode"),
                           (["--mpi-timeout", "5"], "--mpirun and --mpi-timeout need --baseline mpi"),
                           (["--baseline", "mpi", "--mpi-timeout", "0"], "--mpi-timeout 0: need a number >= 1")):
            r = perf(*args)
            self.assertEqual(r.returncode, 2, (args, r.stderr))
            self.assertIn(said, r.stderr)
            self.assertIn("usage", r.stderr)
        r = subprocess.run([os.path.join(BUILD, "perf/sluice-perf-mpi"), "echo", "8"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("usage: mpirun -n 2 sluice-perf-mpi", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
