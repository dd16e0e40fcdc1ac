#!/usr/bin/env python3
"""The layers and size checks (scripts/layers, scripts/sizes): the tree passes them, and a copy
of it with a forbidden include, an oversized function or file added fails them, naming it."""
import pathlib
import shutil
import subprocess
import sys
import tempfile
import unittest

SRC = pathlib.Path(__file__).resolve().parent.parent.parent


def run(script, root):
    p = subprocess.run([sys.executable, str(SRC / 'scripts' / script), '--root', str(root)],
                       capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


class Rules(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.root = pathlib.Path(cls.tmp.name)
        for top in ('lib', 'apps', 'perf'):
            shutil.copytree(SRC / top, cls.root / top, ignore=shutil.ignore_patterns('*.py', '*.md', '*.txt'))
        (cls.root / 'scripts').mkdir()

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def setUp(self):
        shutil.copy(SRC / 'scripts' / 'sizes.allow', self.root / 'scripts')
        self.changed = {}

    def tearDown(self):  # the copy as it was, for the next test
        for path, text in self.changed.items():
            path.write_text(text)

    def edit(self, rel):
        path = self.root / rel
        self.changed.setdefault(path, path.read_text())
        return path

    def add_line(self, rel, line):
        path = self.edit(rel)
        path.write_text(line + '\n' + path.read_text())

    def assert_fails(self, script, *needles):
        code, out = run(script, self.root)
        self.assertEqual(code, 1, out)
        for needle in needles:
            self.assertIn(needle, out)

    def test_tree_passes(self):
        for script in ('layers', 'sizes'):
            code, out = run(script, SRC)
            self.assertEqual(code, 0, out)

    def test_copy_passes(self):
        for script in ('layers', 'sizes'):
            code, out = run(script, self.root)
            self.assertEqual(code, 0, out)

    def test_lower_layer_including_a_higher_one_fails(self):
        self.add_line('lib/door/door.cpp', '#include "am/engine_core.h"')
        self.assert_fails('layers', 'lib/door/door.cpp:1: #include "am/engine_core.h": layer door may not include layer am')

    def test_unknown_layer_fails(self):
        self.add_line('lib/mem/pool.cpp', '#include "extra/thing.h"')
        self.assert_fails('layers', '"extra/" is not a layer of lib/')

    def test_third_party_header_outside_its_owner_fails(self):
        cases = [('lib/mem/pool.cpp', '<ucp/api/ucp.h>', 'only lib/transport/, perf/raw_ucx.cpp include UCX'),
                 ('lib/am/loop.cpp', '<hwloc.h>', 'only lib/topo/ include hwloc'),
                 ('lib/boot/kv.cpp', '<pmix.h>', 'only lib/boot/pmix.cpp include PMIx'),
                 ('lib/core/log.cpp', '<sodium.h>', 'include libsodium'),
                 ('lib/door/auth.cpp', '<openssl/evp.h>', 'only lib/transport/stream_crypto.cpp include OpenSSL'),
                 ('apps/sluice-info/main.cpp', '<ucs/type/status.h>', 'include UCX')]
        for rel, inc, why in cases:
            with self.subTest(rel=rel):
                self.add_line(rel, '#include ' + inc)
                self.assert_fails('layers', f'{rel}:1: #include {inc}: ', why)

    def test_third_party_header_in_an_owner_header_fails(self):
        self.add_line('lib/transport/transport.h', '#include <ucp/api/ucp.h>')
        self.assert_fails('layers', 'UCX is included by .cpp files only, not by headers')

    def test_internal_header_in_a_tool_fails(self):
        self.add_line('apps/sluice-info/main.cpp', '#include "core/log.h"')
        self.assert_fails('layers', "only lib/ includes the library's internal headers")

    def test_long_function_fails(self):
        body = '\n'.join(f'  x += {i};' for i in range(80))
        path = self.edit('lib/door/door.cpp')
        path.write_text(path.read_text() + f'\nint long_one(int x) {{\n{body}\n  return x;\n}}\n')
        self.assert_fails('sizes', 'lib/door/door.cpp:long_one: 83 lines')

    def test_long_file_fails(self):
        path = self.edit('apps/sluice-info/main.cpp')
        path.write_text(path.read_text() + '//\n' * 501)
        code, out = run('sizes', self.root)
        self.assertEqual(code, 1, out)
        self.assertRegex(out, r'apps/sluice-info/main.cpp: \d+ lines \(limit 500\)')

    def test_listed_offenders_pass_and_unlisted_fail(self):
        (self.root / 'scripts' / 'sizes.allow').write_text('')
        code, out = run('sizes', self.root)
        allowed = [l for l in (SRC / 'scripts' / 'sizes.allow').read_text().splitlines()
                   if l and not l.startswith('#')]
        if allowed:
            self.assertEqual(code, 1, out)
            for what in allowed:
                self.assertIn(what + ':', out)


if __name__ == '__main__':
    unittest.main()
