#!/usr/bin/env python3
"""Installed like a library: `meson install` into a scratch prefix, then what a user does with
it. The installed tools run without LD_LIBRARY_PATH; an out-of-tree program (the installed
ping example) builds with pkg-config and with CMake's find_package(Sluice), neither told to use
C++20, and runs under the installed sluice-run (every installed example builds), where SLUICE_FAULT_AT is ignored (no fault
points); pkg-config needs no UCX, hwloc, libsodium or OpenSSL .pc file; the first program of
getting-started.md, as a reader copies it, runs alone and with two and three ranks; every link
of the installed documents leads to an installed file; a different abseil is refused at
configure time, by name. The C API: the installed C and Fortran examples build with
pkg-config's sluice-c (without abseil's .pc files) and with CMake's Sluice::sluice_c and run
(the Fortran RPC server answering the C client);
getting-started.md's C first program runs; the slc_ symbols carry the version node SLUICE_C_1
and none the unreleased SLUICE_C_0."""
import json
import os
import re
import shutil
import subprocess
import tempfile
import textwrap
import unittest

BUILD = os.environ.get("TEST_BUILD_DIR", os.path.join(os.path.dirname(__file__), "../../build"))
ENV = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "PKG_CONFIG_PATH")}


def run(cmd, env=None, cwd=None, timeout=300):
    return subprocess.run(cmd, capture_output=True, text=True, env=env or ENV, cwd=cwd, timeout=timeout)


class Installed(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="sluice-install-")
        options = {o["name"]: o["value"] for o in json.loads(run(["meson", "introspect", BUILD, "--buildoptions"]).stdout)}
        r = run(["meson", "install", "-C", BUILD, "--destdir", cls.tmp, "--no-rebuild", "--quiet"])
        assert r.returncode == 0, r.stdout + r.stderr
        cls.prefix = os.path.join(cls.tmp, options["prefix"].lstrip("/"))
        cls.libdir = os.path.join(cls.prefix, options["libdir"])
        cls.bin = os.path.join(cls.prefix, options["bindir"])
        cls.docs = os.path.join(cls.prefix, options["datadir"], "doc/sluice")
        cls.example = os.path.join(cls.docs, "apps/examples/ping.cpp")
        cls.pkgconfig = os.path.join(cls.libdir, "pkgconfig")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def pkg_config(self, *args, env=None):
        r = run(["pkg-config"] + list(args) + ["sluice"], env=env or dict(ENV, PKG_CONFIG_PATH=self.pkgconfig))
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout.split()

    def build(self, source, out, flags):
        """`c++` as a user runs it: no -std of its own (sluice.pc brings C++20)."""
        r = run(["c++", "-O1", "-Wall", "-Werror", source, "-o", out, "-Wl,-rpath," + self.libdir] + flags)
        self.assertEqual(r.returncode, 0, r.stderr)
        return out

    def check_ping(self, program, env=None):
        r = run([os.path.join(self.bin, "sluice-run"), "-n", "2", program, "200"], env=env)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("round trips", r.stdout)
        return r

    def test_what_is_installed_and_the_tools_find_their_library(self):
        for path in ("include/sluice/sluice.h", "include/sluice/version.h", "share/doc/sluice/README.md",
                     "share/doc/sluice/docs/configuration.md", "share/doc/sluice/apps/examples/blockstore.cpp",
                     "share/man/man7/sluice.7"):
            self.assertTrue(os.path.exists(os.path.join(self.prefix, path)), path)
        for path in ("pkgconfig/sluice.pc", "cmake/Sluice/SluiceConfig.cmake", "cmake/Sluice/SluiceConfigVersion.cmake"):
            self.assertTrue(os.path.exists(os.path.join(self.libdir, path)), path)
        r = run([os.path.join(self.bin, "sluice-info"), "-v"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"# Sluice (\d+\.\d+\.\d+) \(headers \1\), UCX ")
        for tool in ("sluice-run", "sluice-stats", "sluice-perf"):
            r = run([os.path.join(self.bin, tool), "--help"])
            self.assertEqual(r.returncode, 0, tool + ": " + r.stderr)

    def test_perf_finds_its_mpi_program_beside_it(self):
        # sluice-perf --baseline mpi runs the sluice-perf-mpi installed beside it (where meson found MPI).
        if not os.path.exists(os.path.join(self.bin, "sluice-perf-mpi")):
            self.skipTest("built without MPI")
        r = run([os.path.join(self.bin, "sluice-run"), "-n", "2", os.path.join(self.bin, "sluice-perf"), "-t", "am_lat",
                 "-n", "100", "-r", "1", "--baseline", "mpi", "--format", "csv"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("did not run", r.stderr)
        self.assertEqual([line.split(",")[9] for line in r.stdout.splitlines()[1:]], ["mpi-ob1", "mpi-ucx"], r.stdout)

    def test_man_pages_say_what_help_says(self):
        for tool in ("sluice-run", "sluice-info", "sluice-perf"):
            page = os.path.join(self.prefix, "share/man/man1", tool + ".1")
            self.assertTrue(os.path.exists(page), page)
            with open(page) as f:
                roff = f.read().replace("\\-", "-").replace("\\e", "\\")
            self.assertIn(".SH SYNOPSIS", roff)
            self.assertIn(".SH OPTIONS", roff)
            help_text = run([os.path.join(self.bin, tool), "--help"]).stdout
            flags = set(re.findall(r"^  (-[\w-]+)", help_text, re.M))
            self.assertGreater(len(flags), 3, tool)
            for flag in flags:
                self.assertIn(".B " + flag, roff, tool)
            # Every option's term stands alone on its .B line, its text on the next.
            terms = re.findall(r"^\.B (-.*)$", roff, re.M)
            self.assertEqual([t for t in terms if len(t.split()) > 3], [], tool)
            self.assertIn(".SH ENVIRONMENT", roff, tool)
            self.assertIn("\\fBsluice\\fR(7)", roff, tool)
        with open(os.path.join(self.prefix, "share/man/man1/sluice-run.1")) as f:
            self.assertIn("on other hosts", f.read().split(".SH SYNOPSIS")[0])
        with open(os.path.join(self.prefix, "share/man/man1/sluice-stats.1")) as f:  # one option, -h
            roff = f.read().replace("\\-", "-")
        for part in (".SH SYNOPSIS", ".B -h, --help", ".SH EXIT STATUS", "sluice-stats stats/*.jsonl", ".SH ENVIRONMENT"):
            self.assertIn(part, roff)

    def test_sluice_7_lists_every_variable(self):
        with open(os.path.join(self.prefix, "share/man/man7/sluice.7")) as f:
            roff = f.read().replace("\\-", "-")
        table = run([os.path.join(self.bin, "sluice-info"), "-c", "--markdown"]).stdout
        names = re.findall(r"^\| `(SLUICE_\w+)`", table, re.M)
        self.assertGreater(len(names), 30)
        for name in names:
            self.assertIn(".B " + name + "\n", roff)

    def test_a_program_built_with_pkg_config(self):
        out = self.build(self.example, os.path.join(self.tmp, "ping-pc"), self.pkg_config("--cflags", "--libs"))
        self.check_ping(out)
        # The installed library has no fault points: the variable cannot end the process.
        r = self.check_ping(out, env=dict(ENV, SLUICE_FAULT_AT="hello"))
        self.assertIn("SLUICE_FAULT_AT=hello ignored", r.stderr)
        self.assertNotIn("libsluice-testing", " ".join(os.listdir(self.libdir)))

    def test_every_installed_example_builds_against_the_installed_headers(self):
        # ping runs in the tests above; blockstore (RPC: reply, reply_copy, sinks) builds too.
        flags = self.pkg_config("--cflags", "--libs")
        for name in sorted(os.listdir(os.path.dirname(self.example))):
            if name.endswith(".cpp"):
                source = os.path.join(os.path.dirname(self.example), name)
                out = self.build(source, os.path.join(self.tmp, "example-" + name[:-4]), flags)
                self.assertTrue(os.access(out, os.X_OK), out)

    def test_pkg_config_needs_no_dev_package_of_the_librarys_own_dependencies(self):
        # A search path with sluice.pc and abseil's .pc files only, as on a machine without the
        # UCX, hwloc, libsodium and OpenSSL -dev packages: --cflags and --libs answer, and a
        # program builds and runs (dynamic linking needs only their runtime libraries).
        system = run(["pkg-config", "--variable", "pc_path", "pkg-config"]).stdout.strip().split(":")
        absl = os.path.join(self.tmp, "absl-only")
        os.makedirs(absl, exist_ok=True)
        for d in system:
            for name in os.listdir(d) if os.path.isdir(d) else ():
                if name.startswith("absl_") and not os.path.exists(os.path.join(absl, name)):
                    os.symlink(os.path.join(d, name), os.path.join(absl, name))
        env = {k: v for k, v in ENV.items() if not k.startswith("PKG_CONFIG")}
        env["PKG_CONFIG_LIBDIR"] = self.pkgconfig + ":" + absl
        self.assertNotEqual(run(["pkg-config", "--exists", "ucx"], env=env).returncode, 0)
        flags = self.pkg_config("--cflags", "--libs", env=env)
        self.check_ping(self.build(self.example, os.path.join(self.tmp, "ping-nodev"), flags))
        # What a static link needs is where --static asks for it.
        static = self.pkg_config("--static", "--libs")
        for lib in ("-lucp", "-lhwloc", "-lsodium", "-lcrypto"):
            self.assertIn(lib, static)
            self.assertNotIn(lib, flags)

    def test_an_older_standard_stops_at_one_error_saying_cpp20(self):
        src = os.path.join(self.tmp, "cpp17.cpp")
        with open(src, "w") as f:
            f.write("#include <sluice/sluice.h>\nint main() {}\n")
        r = run(["c++", "-fsyntax-only", src] + self.pkg_config("--cflags") + ["-std=c++17"])
        self.assertNotEqual(r.returncode, 0)
        first = [l for l in r.stderr.splitlines() if "error" in l][0]
        self.assertIn("need C++20", first)

    def installed_docs(self):
        """(path relative to the doc directory, text) of every installed Markdown document."""
        docs = []
        for root, _, files in os.walk(self.docs):
            for name in sorted(files):
                if name.endswith(".md"):
                    with open(os.path.join(root, name)) as f:
                        docs.append((os.path.relpath(os.path.join(root, name), self.docs), f.read()))
        return docs

    def test_every_link_of_the_installed_docs_leads_to_an_installed_file(self):
        checked = 0
        for name, text in self.installed_docs():
            text = re.sub(r"^```.*?^```$", "", text, flags=re.M | re.S)  # code is not links
            for target in re.findall(r"\]\(([^)\s]+)\)", text):
                if re.match(r"[a-z]+:", target) or target.startswith("#"):
                    continue
                path = os.path.normpath(os.path.join(self.docs, os.path.dirname(name), target.split("#")[0]))
                self.assertTrue(os.path.exists(path), "%s links to %s, not installed" % (name, target))
                checked += 1
        self.assertGreater(checked, 20)

    def test_every_cpp_block_of_the_docs_compiles_against_the_installed_headers(self):
        cflags = self.pkg_config("--cflags")
        blocks = []
        for name, text in self.installed_docs():
            blocks += [(name, b) for b in re.findall(r"^```cpp\n(.*?)^```$", text, re.M | re.S)]
        self.assertGreaterEqual(len(blocks), 2, "the C++ blocks of getting-started.md and rpc.md")
        for i, (name, code) in enumerate(blocks):
            src = os.path.join(self.tmp, "snippet%d.cpp" % i)
            with open(src, "w") as f:
                f.write(code)
            r = run(["c++", "-fsyntax-only", "-Wall", "-Werror", src] + cflags)
            self.assertEqual(r.returncode, 0, "%s, block %d:\n%s\n%s" % (name, i, code, r.stderr))

    def test_the_first_program_runs_alone_and_with_two_and_three_ranks(self):
        # The block of getting-started.md marked "first.cpp", exactly as a reader copies it.
        with open(os.path.join(self.docs, "docs/getting-started.md")) as f:
            m = re.search(r"^<!-- first\.cpp: .*?-->\n```cpp\n(.*?)^```$", f.read(), re.M | re.S)
        self.assertIsNotNone(m, "getting-started.md has no block marked first.cpp")
        src = os.path.join(self.tmp, "first.cpp")
        with open(src, "w") as f:
            f.write(m.group(1))
        first = self.build(src, os.path.join(self.tmp, "first"), self.pkg_config("--cflags", "--libs"))
        for n in (1, 2, 3):
            cmd = [first] if n == 1 else [os.path.join(self.bin, "sluice-run"), "-n", str(n), first]
            r = run(cmd, timeout=120)
            self.assertEqual(r.returncode, 0, "%d ranks: %s%s" % (n, r.stdout, r.stderr))
            self.assertEqual(sorted(r.stdout.splitlines()),
                             ["first: rank %d of %d got 64 bytes from rank %d" % (i, n, (i + n - 1) % n)
                              for i in range(n)])

    def test_only_the_public_api_is_exported(self):
        lib = os.path.join(self.libdir, "libsluice.so")
        r = run(["nm", "-D", "-C", "--defined-only", lib])
        self.assertEqual(r.returncode, 0, r.stderr)
        names = [line.split(" ", 2)[2] for line in r.stdout.splitlines() if line.count(" ") >= 2]
        ours = [n for n in names if re.match(r"(typeinfo (name )?for |vtable for )?sluice::", n)]
        self.assertIn("sluice::Engine::progress()", ours)
        self.assertIn("sluice::Config::from_env()", ours)
        internal = [n for n in ours if re.match(r"(typeinfo (name )?for |vtable for )?sluice::detail::", n)]
        self.assertEqual(internal, [], "internal symbols in the library's ABI")

    def test_a_program_built_with_cmake(self):
        src = os.path.join(self.tmp, "cmake-src")
        os.makedirs(src, exist_ok=True)
        shutil.copy(self.example, src)
        with open(os.path.join(src, "CMakeLists.txt"), "w") as f:
            f.write(textwrap.dedent("""\
                cmake_minimum_required(VERSION 3.16)
                project(ping CXX)
                find_package(Sluice 0.1 REQUIRED)
                add_executable(ping ping.cpp)
                target_link_libraries(ping PRIVATE Sluice::sluice)
                """))
        out = os.path.join(self.tmp, "cmake-build")
        r = run(["cmake", "-S", src, "-B", out, "-DCMAKE_PREFIX_PATH=" + self.prefix,
                 "-DCMAKE_BUILD_RPATH=" + self.libdir])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        r = run(["cmake", "--build", out])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.check_ping(os.path.join(out, "ping"))
        # Sluice::sluice asks for at least C++20 as a compile feature: a C++23 project's command
        # lines carry its own standard alone, not sluice.pc's -std=c++20 beside it.
        with open(os.path.join(src, "CMakeLists.txt")) as f:
            text = f.read().replace("project(ping CXX)", "project(ping CXX)\nset(CMAKE_CXX_STANDARD 23)")
        with open(os.path.join(src, "CMakeLists.txt"), "w") as f:
            f.write(text)
        out23 = os.path.join(self.tmp, "cmake-build-23")
        r = run(["cmake", "-S", src, "-B", out23, "-DCMAKE_PREFIX_PATH=" + self.prefix,
                 "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with open(os.path.join(out23, "compile_commands.json")) as f:
            command = json.load(f)[0]["command"]
        self.assertRegex(command, r"-std=(gnu|c)\+\+(23|2b)")
        self.assertNotIn("-std=c++20", command)

    def c_program(self, source, out, compiler, flags):
        r = run([compiler, source, "-o", out, "-Wl,-rpath," + self.libdir] + flags)
        self.assertEqual(r.returncode, 0, r.stderr)
        return out

    def test_c_and_fortran_programs_built_with_pkg_config(self):
        # sluice-c.pc: the C header and Fortran module's directories and -lsluice; no C++ flag
        # and no abseil package needed. The installed C and Fortran examples build and run.
        env = {k: v for k, v in ENV.items() if not k.startswith("PKG_CONFIG")}
        env["PKG_CONFIG_LIBDIR"] = self.pkgconfig  # nothing else: not even abseil's .pc files
        r = run(["pkg-config", "--cflags", "--libs", "sluice-c"], env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        flags = r.stdout.split()
        self.assertNotIn("-std=c++20", flags)
        examples = os.path.dirname(self.example)
        strict = ["-std=c99", "-pedantic", "-Wall", "-Wextra", "-Werror"] + flags
        self.check_ping(self.c_program(os.path.join(examples, "c/ping.c"), os.path.join(self.tmp, "ping-c"), "cc", strict))
        rpc = self.c_program(os.path.join(examples, "c/rpc.c"), os.path.join(self.tmp, "rpc-c"), "cc", strict)
        r = run([os.path.join(self.bin, "sluice-run"), "-n", "2", rpc])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("101 calls answered", r.stdout)
        if not os.path.exists(os.path.join(self.prefix, "include/sluice/fortran/sluice.mod")):
            self.skipTest("built without a Fortran compiler")
        ping_f = self.c_program(os.path.join(examples, "fortran/ping.f90"), os.path.join(self.tmp, "ping-f"), "gfortran",
                                ["-std=f2018"] + flags)
        self.check_ping(ping_f)
        server_f = self.c_program(os.path.join(examples, "fortran/rpc_server.f90"), os.path.join(self.tmp, "rpc-server-f"),
                                  "gfortran", ["-std=f2018"] + flags)
        by_rank = f'if [ "$SLUICE_RANK" = 0 ]; then exec {server_f}; else exec {rpc}; fi'
        r = run([os.path.join(self.bin, "sluice-run"), "-n", "2", "sh", "-c", by_rank])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("rpc_server_f: served 101 echo calls", r.stdout)

    def test_c_and_fortran_programs_built_with_cmake(self):
        src = os.path.join(self.tmp, "cmake-c-src")
        os.makedirs(src, exist_ok=True)
        examples = os.path.dirname(self.example)
        shutil.copy(os.path.join(examples, "c/ping.c"), src)
        fortran = os.path.exists(os.path.join(self.prefix, "include/sluice/fortran/sluice.mod"))
        with open(os.path.join(src, "CMakeLists.txt"), "w") as f:
            f.write("cmake_minimum_required(VERSION 3.16)\nproject(ping C%s)\nfind_package(Sluice 0.1 REQUIRED)\n"
                    "add_executable(ping_c ping.c)\ntarget_link_libraries(ping_c PRIVATE Sluice::sluice_c)\n"
                    % (" Fortran" if fortran else ""))
            if fortran:
                shutil.copy(os.path.join(examples, "fortran/ping.f90"), src)
                f.write("add_executable(ping_f ping.f90)\ntarget_link_libraries(ping_f PRIVATE Sluice::sluice_c)\n")
        out = os.path.join(self.tmp, "cmake-c-build")
        r = run(["cmake", "-S", src, "-B", out, "-DCMAKE_PREFIX_PATH=" + self.prefix, "-DCMAKE_BUILD_RPATH=" + self.libdir])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        r = run(["cmake", "--build", out])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        for exe in ["ping_c"] + (["ping_f"] if fortran else []):
            self.check_ping(os.path.join(out, exe))

    def test_the_c_first_program_runs_alone_and_with_two_ranks(self):
        with open(os.path.join(self.docs, "docs/getting-started.md")) as f:
            m = re.search(r"^<!-- first\.c: .*?-->\n```c\n(.*?)^```$", f.read(), re.M | re.S)
        self.assertIsNotNone(m, "getting-started.md has no block marked first.c")
        src = os.path.join(self.tmp, "first.c")
        with open(src, "w") as f:
            f.write(m.group(1))
        flags = run(["pkg-config", "--cflags", "--libs", "sluice-c"], env=dict(ENV, PKG_CONFIG_PATH=self.pkgconfig))
        first = self.c_program(src, os.path.join(self.tmp, "first-c"), "cc",
                               ["-std=c99", "-Wall", "-Wextra", "-Werror"] + flags.stdout.split())
        for n in (1, 2):
            cmd = [first] if n == 1 else [os.path.join(self.bin, "sluice-run"), "-n", str(n), first]
            r = run(cmd, timeout=120)
            self.assertEqual(r.returncode, 0, "%d ranks: %s%s" % (n, r.stdout, r.stderr))
            self.assertEqual(sorted(r.stdout.splitlines()),
                             ["first_c: rank %d of %d got 64 bytes from rank %d" % (i, n, (i + n - 1) % n)
                              for i in range(n)])

    def test_the_c_symbols_carry_their_version_node(self):
        r = run(["readelf", "--dyn-syms", "-W", os.path.join(self.libdir, "libsluice.so")])
        self.assertEqual(r.returncode, 0, r.stderr)
        c = re.findall(r" (slc_\w+)(@*\S*)$", r.stdout, re.M)
        self.assertGreater(len(c), 30)
        self.assertEqual([n for n, v in c if v != "@@SLUICE_C_1"], [])
        self.assertNotIn("@@SLUICE_C_1", "".join(l for l in r.stdout.splitlines() if " slc_" not in l))
        self.assertNotIn("SLUICE_C_0", r.stdout)

    def test_another_abseil_is_refused_by_name(self):
        # A stand-in abseil of another release ahead on the search path.
        fake = os.path.join(self.tmp, "fake-absl")
        os.makedirs(fake, exist_ok=True)
        for name in ("absl_status", "absl_statusor", "absl_str_format"):
            with open(os.path.join(fake, name + ".pc"), "w") as f:
                f.write("Name: %s\nDescription: not the one\nVersion: 20990101\nCflags:\nLibs:\n" % name)
        path = fake + ":" + os.path.join(self.libdir, "pkgconfig")
        r = run(["pkg-config", "--cflags", "sluice"], env=dict(ENV, PKG_CONFIG_PATH=path))
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("absl_status", r.stdout + r.stderr)
        src = os.path.join(self.tmp, "cmake-absl")
        os.makedirs(src, exist_ok=True)
        with open(os.path.join(src, "CMakeLists.txt"), "w") as f:
            f.write("cmake_minimum_required(VERSION 3.16)\nproject(x CXX)\nfind_package(Sluice REQUIRED)\n")
        r = run(["cmake", "-S", src, "-B", os.path.join(self.tmp, "cmake-absl-build"), "-DCMAKE_PREFIX_PATH=" + self.prefix],
                env=dict(ENV, PKG_CONFIG_PATH=fake))
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("was built with abseil", r.stdout + r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
