#!/usr/bin/env python3
"""scripts/goals: how it tells the machine's mode from the probes around an invocation, how it
judges a mode's rounds against a goal (a pml that did not run is not met), that its table has
columns only for the modes that occurred, and, with sluice-perf built, one real probe (raw
UCX's 8-byte one-way latency, from a two-rank sluice-perf run)."""
import contextlib
import importlib.machinery
import importlib.util
import io
import math
import os
import unittest

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "../.."))
_loader = importlib.machinery.SourceFileLoader("goals", os.path.join(SRC, "scripts/goals"))
_spec = importlib.util.spec_from_loader("goals", _loader)
goals = importlib.util.module_from_spec(_spec)
_loader.exec_module(goals)

BUILD = os.environ.get("TEST_BUILD_DIR", os.path.join(SRC, "build"))


class ModeTest(unittest.TestCase):
    def test_both_probes_decide(self):
        self.assertEqual(goals.mode(0.17, 0.25, 0.4), "fast")
        self.assertEqual(goals.mode(0.62, 0.40, 0.4), "slow")  # the bound itself is slow
        self.assertEqual(goals.mode(0.17, 0.62, 0.4), "mixed")
        self.assertEqual(goals.mode(0.62, 0.17, 0.4), "mixed")


class VerdictTest(unittest.TestCase):
    def test_median_against_the_bound(self):
        self.assertEqual(goals.verdict([1.05, 1.20, 1.08], 1.10, "le"), ("1.08", "yes"))
        self.assertEqual(goals.verdict([1.15, 1.21], 1.10, "le"), ("1.18", "NO"))
        self.assertEqual(goals.verdict([0.90, 0.80, 0.86], 0.85, "ge"), ("0.86", "yes"))
        self.assertEqual(goals.verdict([0.84], 0.85, "ge"), ("0.84", "NO"))

    def test_a_round_that_did_not_run_fails_the_goal(self):
        self.assertEqual(goals.verdict([1.0, math.nan], 1.10, "le"), ("-", "NO (did not run)"))

    def test_a_mode_without_rounds_says_nothing(self):
        self.assertEqual(goals.verdict([], 1.10, "le"), ("", ""))


class ReportTest(unittest.TestCase):
    def rows(self, by_mode):
        return [("am_lat 8 B", "<= 1.1", 1.10, "le", {m: by_mode.get(m, []) for m in goals.MODES})]

    def report(self, by_mode, markdown, probes):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            goals.report(self.rows(by_mode), markdown, probes, 0.4)
        return out.getvalue().splitlines()

    def test_only_modes_that_occurred_get_columns(self):
        lines = self.report({"fast": [1.2, 1.1, 1.3], "slow": [1.0]}, True, [0.17, 0.2, 0.62])
        self.assertIn("fast mode", lines[0])
        self.assertIn("slow mode", lines[0])
        self.assertNotIn("mixed mode", lines[0])
        self.assertEqual(lines[2], "| `am_lat 8 B` | <= 1.1 | 1.20 1.10 1.30 | 1.20 | NO | 1.00 | 1.00 | yes |")
        self.assertIn("fast (below 0.4 µs): 2 probes, 0.170-0.200 µs", lines[-1])
        self.assertIn("slow: 1 probes, 0.620-0.620 µs", lines[-1])

    def test_text_table_without_slow_rounds(self):
        lines = self.report({"fast": [1.05]}, False, [0.17, 0.2])
        self.assertIn("fast (rounds)", lines[0])
        self.assertNotIn("slow", lines[0])
        self.assertTrue(lines[1].startswith("am_lat 8 B"))
        self.assertTrue(lines[1].rstrip().endswith("1.05 yes"))
        self.assertIn("slow: none", lines[-1])


@unittest.skipUnless(os.path.exists(os.path.join(BUILD, "perf/sluice-perf")), "sluice-perf not built")
class ProbeTest(unittest.TestCase):
    def test_a_real_probe_reads_raw_ucx_latency(self):
        p = goals.probe(BUILD)
        self.assertGreater(p, 0.0)
        self.assertLess(p, 100.0)  # µs: an 8-byte one-way over shared memory, even on a slow VM


if __name__ == "__main__":
    unittest.main()
