#!/usr/bin/env python3
"""Installed like a library: `meson install` into a scratch prefix, then what a user does with
it. The installed tools run without LD_LIBRARY_PATH; an out-of-tree program (the installed
ping example) builds with pkg-config and with CMake's find_package(Sluice) and runs under the
installed sluice-run, where SLUICE_FAULT_AT is ignored (no fault points); a different abseil is
refused at configure time, by name."""
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
        cls.example = os.path.join(cls.prefix, options["datadir"], "doc/sluice/examples/ping.cpp")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def check_ping(self, program, env=None):
        r = run([os.path.join(self.bin, "sluice-run"), "-n", "2", program, "200"], env=env)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("round trips", r.stdout)
        return r

    def test_what_is_installed_and_the_tools_find_their_library(self):
        for path in ("include/sluice/sluice.h", "include/sluice/version.h", "share/doc/sluice/README.md",
                     "share/doc/sluice/configuration.md", "share/doc/sluice/examples/blockstore.cpp"):
            self.assertTrue(os.path.exists(os.path.join(self.prefix, path)), path)
        for path in ("pkgconfig/sluice.pc", "cmake/Sluice/SluiceConfig.cmake", "cmake/Sluice/SluiceConfigVersion.cmake"):
            self.assertTrue(os.path.exists(os.path.join(self.libdir, path)), path)
        r = run([os.path.join(self.bin, "sluice-info"), "-v"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"# Sluice (\d+\.\d+\.\d+) \(headers \1\), UCX ")
        for tool in ("sluice-run", "sluice-perf"):
            r = run([os.path.join(self.bin, tool), "--help"])
            self.assertEqual(r.returncode, 0, tool + ": " + r.stderr)

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

    def test_a_program_built_with_pkg_config(self):
        pc = run(["pkg-config", "--cflags", "--libs", "sluice"],
                 env=dict(ENV, PKG_CONFIG_PATH=os.path.join(self.libdir, "pkgconfig")))
        self.assertEqual(pc.returncode, 0, pc.stderr)
        out = os.path.join(self.tmp, "ping-pc")
        r = run(["c++", "-std=c++20", "-O1", self.example, "-o", out, "-Wl,-rpath," + self.libdir] + pc.stdout.split())
        self.assertEqual(r.returncode, 0, r.stderr)
        self.check_ping(out)
        # The installed library has no fault points: the variable cannot end the process.
        r = self.check_ping(out, env=dict(ENV, SLUICE_FAULT_AT="hello"))
        self.assertIn("SLUICE_FAULT_AT=hello ignored", r.stderr)
        self.assertNotIn("libsluice-testing", " ".join(os.listdir(self.libdir)))

    def test_every_cpp_block_of_the_docs_compiles_against_the_installed_headers(self):
        cflags = run(["pkg-config", "--cflags", "sluice"],
                     env=dict(ENV, PKG_CONFIG_PATH=os.path.join(self.libdir, "pkgconfig")))
        self.assertEqual(cflags.returncode, 0, cflags.stderr)
        docs = os.path.join(self.prefix, "share/doc/sluice")
        blocks = []
        for name in sorted(os.listdir(docs)):
            if name.endswith(".md"):
                with open(os.path.join(docs, name)) as f:
                    blocks += [(name, b) for b in re.findall(r"^```cpp\n(.*?)^```$", f.read(), re.M | re.S)]
        self.assertGreaterEqual(len(blocks), 2, "the C++ blocks of getting-started.md and rpc.md")
        for i, (name, code) in enumerate(blocks):
            src = os.path.join(self.tmp, "snippet%d.cpp" % i)
            with open(src, "w") as f:
                f.write(code)
            r = run(["c++", "-std=c++20", "-fsyntax-only", "-Wall", "-Werror", src] + cflags.stdout.split())
            self.assertEqual(r.returncode, 0, "%s, block %d:\n%s\n%s" % (name, i, code, r.stderr))

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
                set(CMAKE_CXX_STANDARD 20)
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
