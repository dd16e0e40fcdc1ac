#!/usr/bin/env python3
"""scripts/instructions' reading of callgrind files and its fit: a canned two-part file (names
defined in part 1 and used in part 2, a call's inclusive cost that is not self cost, relative
positions), where rank 1's profile is cut, the fit, a file callgrind writes for /bin/true cut
in two, and, with sluice-perf built, one short run of rank 1 cut into Sluice's test and the raw
loop's. The cases that need valgrind are skipped without it (scripts/setup does not install
it: apt-get install valgrind)."""
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "../.."))
sys.path.insert(0, os.path.join(SRC, "scripts"))
import callgrind_profile as cg  # noqa: E402

_loader = importlib.machinery.SourceFileLoader("instructions", os.path.join(SRC, "scripts/instructions"))
_spec = importlib.util.spec_from_loader("instructions", _loader)
instructions = importlib.util.module_from_spec(_spec)
_loader.exec_module(instructions)

BUILD = os.environ.get("TEST_BUILD_DIR", os.path.join(SRC, "build"))

PART1 = """# callgrind format
version: 1
creator: callgrind-3.19.0
pid: 42
part: 1
desc: Trigger: --dump-before=sluice::perf::RawUcx::run(int)
positions: line
events: Ir
summary: 1180

ob=(1) /tmp/b/lib/libsluice.so.0.1.0
fl=(1) lib/am/receive.cpp
fn=(1) sluice::detail::EngineCore::on_rx(sluice::detail::Op*, int) [clone .cold]
10 100
+2 50
cob=(2) /usr/lib/x86_64-linux-gnu/libucp.so.0.0.0
cfi=(2) ???
cfn=(2) ucp_worker_progress
calls=3 0
* 900
* 30

ob=(2)
fl=(2)
fn=(2)
0 1000
"""
PART2 = """# callgrind format
version: 1
pid: 42
part: 2
desc: Trigger: Program termination
positions: line
events: Ir
totals: 260

ob=(3) /usr/lib/x86_64-linux-gnu/libc.so.6
fl=(3) memcpy.S
fn=(3) memcpy
0 60
ob=(1)
fl=(1)
fn=(4) sluice::detail::{anonymous}::f()
fi=(4) lib/wire/wire.h
3 200
"""


class Parse(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.dir)

    def write(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_self_cost_calls_and_groups_across_two_parts(self):
        # listed out of order: parse_parts orders them by their part: line
        p1, p2 = cg.parse_parts([self.write("cg.42", PART2), self.write("cg.42.1", PART1)])
        on_rx = ("libsluice.so.0.1.0", "sluice::detail::EngineCore::on_rx(sluice::detail::Op*, int) [clone .cold]")
        self.assertEqual(p1.self_cost[on_rx], 180)  # 100 + 50 + 30; the call's 900 is inclusive
        self.assertEqual(p1.self_cost[("libucp.so.0.0.0", "ucp_worker_progress")], 1000)
        self.assertEqual(p1.calls_to("ucp_worker_progress"), 3)
        self.assertEqual((p1.total, p1.part, p1.pid), (1180, 1, 42))
        self.assertIn("RawUcx::run", p1.trigger)
        self.assertEqual(p1.by_group(), {"sluice": 180, "ucx": 1000, "libc": 0, "bench": 0, "other": 0})
        # part 2 names libsluice by the id part 1 gave it
        self.assertEqual(p2.self_cost[("libsluice.so.0.1.0", "sluice::detail::{anonymous}::f()")], 200)
        self.assertEqual(p2.by_group()["libc"], 60)
        merged = cg.Profile().add(p1).add(p2)
        self.assertEqual(merged.total, 1440)
        self.assertEqual(merged.by_group()["sluice"], 380)

    def test_a_part_read_alone_cannot_use_names_it_never_saw(self):
        with self.assertRaisesRegex(ValueError, "ob id 1 before naming it"):
            cg.parse(self.write("cg.42", PART2))

    def test_self_costs_that_miss_the_totals_line_are_an_error(self):
        with self.assertRaisesRegex(ValueError, "add up to 1180, its totals line says 1181"):
            cg.parse(self.write("cg.1", PART1.replace("summary: 1180", "summary: 1181")))

    def test_groups_and_short_names(self):
        self.assertEqual(cg.group_of("/usr/lib/x86_64-linux-gnu/ucx/libuct_cma.so.0.0.0"), "ucx")
        self.assertEqual(cg.group_of("libucs.so.0"), "ucx")
        self.assertEqual(cg.group_of("/tmp/b/perf/sluice-perf"), "bench")
        self.assertEqual(cg.group_of("libc.so.6"), "libc")
        self.assertEqual(cg.group_of("libcrypto.so.3"), "other")
        self.assertEqual(cg.group_of("ld-linux-x86-64.so.2"), "other")
        self.assertEqual(cg.short_function("sluice::Peer::send(std::span<int>, int) [clone .isra.0]"),
                         "sluice::Peer::send")
        self.assertEqual(cg.short_function("a::B<int (*)(int)>::operator()(int) const"),
                         "a::B<int (*)(int)>::operator()")
        self.assertEqual(cg.short_function("sluice::(anonymous namespace)::g(int)"), "sluice::{anon}::g")


class Cut(unittest.TestCase):
    def parts(self, *triggers):
        out = []
        for t in triggers:
            p = cg.Profile()
            p.trigger = t
            out.append(p)
        return out

    def test_sluice_and_raw_are_the_second_and_third_parts(self):
        parts = self.parts("--dump-before=(anonymous namespace)::Bench::run_one(Cmd const&)",
                           "--dump-before=(anonymous namespace)::Bench::run_one(Cmd const&)",
                           "--dump-after=sluice::perf::Bench::run_raw(sluice::perf::Test const&, Cmd const&)", "Program termination")
        self.assertEqual(instructions.split_parts(parts, "x"), (parts[1], parts[2]))

    def test_a_profile_cut_elsewhere_is_refused(self):
        parts = self.parts("--dump-before=(anonymous namespace)::Bench::run_one(Cmd const&)",
                           "--dump-after=sluice::perf::Bench::run_raw(sluice::perf::Test const&, Cmd const&)", "Program termination")
        with self.assertRaises(SystemExit):
            instructions.split_parts(parts, "x")


class Fit(unittest.TestCase):
    def profile(self, total, polls, sluice_share):
        p = cg.Profile()
        p.self_cost = {("libsluice.so.0", "f()"): int(total * sluice_share),
                       ("libucp.so.0", "ucp_worker_progress"): total - int(total * sluice_share)}
        p.calls = {("libucp.so.0", "ucp_worker_progress"): polls}
        p.total = total
        return p

    def test_recovers_cost_per_iteration_and_per_poll(self):
        # Ir = 5,000,000 + 1,200 per iteration + 170 per poll, polls varying from run to run
        runs = [(m, self.profile(5_000_000 + 1200 * m + 170 * p, p, 0.5))
                for m, p in [(20000, 400000), (40000, 700000), (20000, 90000), (40000, 130000)]]
        fit = instructions.per_message(runs)
        self.assertAlmostEqual(fit["no_poll"], 1200, delta=0.01)
        self.assertAlmostEqual(fit["poll"], 170, delta=0.01)
        self.assertAlmostEqual(fit["one_poll"], 1370, delta=0.01)
        self.assertAlmostEqual(fit["sluice"]["one_poll"] + fit["ucx"]["one_poll"], 1370, delta=0.1)
        self.assertAlmostEqual(fit["functions"]["sluice\tf"], fit["sluice"]["one_poll"], delta=0.01)


    def test_runs_that_polled_in_one_proportion_are_refused(self):
        # polls = 25 per iteration in every run: messages and polls cannot be told apart
        runs = [(m, self.profile(1000 * m + 25 * 170 * m, 25 * m, 0.5)) for m in (20000, 40000, 20000, 40000)]
        with self.assertRaises(SystemExit):
            instructions.per_message(runs)


class Report(unittest.TestCase):
    def result(self, sluice_cost, raw_cost):
        fit = Fit().profile
        out = {}
        for test in instructions.TESTS:
            out[test] = {}
            for kind, cost in (("sluice", sluice_cost), ("raw", raw_cost)):
                runs = [(m, fit(10**6 + cost * m + 100 * p, p, 0.5 if kind == "sluice" else 0.0))
                        for m, p in [(20000, 400000), (40000, 700000), (20000, 90000), (40000, 130000)]]
                out[test][kind] = instructions.per_message(runs)
        return out

    def test_one_build_shows_sluice_against_raw(self):
        text = instructions.report(["build (abc1234, debugoptimized)"], [self.result(1400, 600)], False)
        self.assertRegex(text, r"am_lat Sluice +1,500 ")  # 1,400 + one poll of 100
        self.assertRegex(text, r"am_lat Sluice/raw +2\.14x +2\.33x")  # 1,500 / 700, 1,400 / 600
        self.assertIn("am_lat Sluice: 2,900, 1,600", text)  # 1,400 + 100 x the extra polls per iteration

    def test_two_builds_show_the_difference(self):
        text = instructions.report(["a", "b"], [self.result(1400, 600), self.result(1370, 600)], True)
        self.assertIn("| am_lat Sluice one poll | 1,500 | 1,470 | -30 | -2.0% |", text)
        self.assertIn("| am_lat raw UCX one poll | 700 | 700 | 0 | 0.0% |", text)


@unittest.skipUnless(shutil.which("valgrind"), "valgrind not installed")
class LiveCallgrind(unittest.TestCase):
    def test_a_file_cut_in_two_by_callgrind_reads_back(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "cg.%p")
            subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out, "--dump-before=exit",
                            "/bin/true"], check=True, capture_output=True, timeout=120)
            files = [os.path.join(d, f) for f in os.listdir(d)]
            self.assertEqual(len(files), 2, files)
            parts = cg.parse_parts(files)
            self.assertEqual([p.part for p in parts], [1, 2])
            self.assertIn("exit", parts[0].trigger)
            self.assertGreater(parts[0].by_group()["libc"], 0)
            self.assertGreater(parts[0].total, 10000)

    @unittest.skipUnless(os.path.exists(os.path.join(BUILD, "perf/sluice-perf")), "sluice-perf not built")
    def test_rank_1_is_cut_where_the_raw_loop_starts(self):
        build = instructions.Build(BUILD)
        with tempfile.TemporaryDirectory() as d:
            sluice, raw = instructions.run_once(build, "am_lat", 500, d)
        self.assertGreater(sluice.by_group()["sluice"], 0)
        self.assertEqual(raw.by_group()["sluice"], 0)  # the raw loop never enters libsluice
        self.assertGreater(raw.by_group()["ucx"], 0)
        self.assertGreater(raw.calls_to("ucp_worker_progress"), 0)


if __name__ == "__main__":
    unittest.main()
