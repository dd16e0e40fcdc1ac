#!/usr/bin/env python3
"""The layers and size checks (scripts/layers, scripts/sizes): the tree passes them, and a copy
of it with a forbidden include, an oversized function, file or class added fails them, naming it;
the sizes script counts a class's member functions as the rule means them."""
import importlib.machinery
import importlib.util
import pathlib
import shutil
import subprocess
import sys
import tempfile
import unittest

SRC = pathlib.Path(__file__).resolve().parent.parent.parent


def load_sizes():
    loader = importlib.machinery.SourceFileLoader('sizes', str(SRC / 'scripts' / 'sizes'))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader('sizes', loader))
    loader.exec_module(module)
    return module


# Every kind of declaration a class body holds: 14 member functions of Known count (the
# constructors, the destructor, the move assignment and the other operators, inline or not,
# templates), the deleted ones, friends, types, data members and their initializers do not;
# Known::Nested's 2 count for it alone.
KNOWN = """
namespace sluice::detail {
template <typename T>
class Known final : public Base<T>, private Other {
 public:
  struct Nested {  // counted on its own
    int a = 0;
    void one() const;
    bool two() { return a != 0; }
  };
  enum class Mode : std::uint8_t { kA, kB };
  using Callback = void (*)(int);
  friend class Friend;
  friend bool operator==(const Known& a, const Known& b) { return a.x_ == b.x_; }

  Known();
  explicit Known(int x) : x_(x), list_{1, 2}, name_{"a{"} {
    if (x > 0) {
      ++x_;
    }
  }
  ~Known() = default;
  Known(const Known&) = delete;
  Known& operator=(const Known&) = delete;
  Known(Known&&) noexcept;
  Known& operator=(Known&& o) noexcept {
    x_ = o.x_;  // not a { brace
    return *this;
  }
  bool operator<(const Known& o) const { return x_ < o.x_; }
  int operator()(int a) const;
  explicit operator bool() const { return x_ != 0; }

  [[nodiscard]] int x() const { return x_; }
  template <typename F>
  void each(F&& f) {
    for (int v : list_) f(v);
  }
  virtual void hook(int a = f(1), int b = 2) = 0;
  static Known make(std::function<void(int)> cb);
  auto size() const -> std::size_t { return list_.size(); }

 private:
  static_assert(sizeof(int) == 4, "ints");
  void helper() ABSL_LOCKS_EXCLUDED(mu_);
  int x_ ABSL_GUARDED_BY(mu_) = 0;
  std::function<void(int)> on_event_;
  void (*raw_)(int) = nullptr;
  void (Known::*method_)() = nullptr;
  decltype(sizeof(int)) count_ = 0;
  alignas(64) std::atomic<int> hot_{0};
  std::vector<int> list_{1, 2, 3};
  std::string name_ = std::string("x");
  std::function<int()> lambda_ = [this]() { return x_; };
  static constexpr int kMax = std::max(1, 2);
  unsigned bits_ : 3;
};
struct Later;
}  // namespace sluice::detail
"""
KNOWN_MEMBERS = ['Known', 'Known', '~Known', 'Known', 'operator=', 'operator<', 'operator()', 'operator bool', 'x',
                 'each', 'hook', 'make', 'size', 'helper']


def big_class(name, functions, deleted=0):
    """A class of `functions` member functions (half of them defined inline), and `deleted`
    deleted ones."""
    body = [f'  {name}();']
    body += [f'  int get{i}() const {{ return {i}; }}' if i % 2 else f'  void set{i}(int x);'
             for i in range(functions - 1)]
    body += [f'  void no{i}(double) = delete;' for i in range(deleted)]
    return f'\nclass {name} {{\n public:\n' + '\n'.join(body) + '\n\n private:\n  int x_ = 0;\n};\n'


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

    def test_class_members_counted_as_the_rule_means(self):
        sizes = load_sizes()
        found = {name: (kind, members) for kind, name, _, members in sizes.classes(sizes.strip_code(KNOWN))}
        self.assertEqual(sorted(found), ['Known', 'Known::Nested'])
        self.assertEqual(found['Known'], ('class', KNOWN_MEMBERS))
        self.assertEqual(found['Known::Nested'], ('struct', ['one', 'two']))

    def test_deleted_functions_do_not_count(self):
        path = self.edit('lib/flow/flow.h')
        path.write_text(path.read_text() + big_class('Full', 40, deleted=5))
        code, out = run('sizes', self.root)
        self.assertEqual(code, 0, out)
        self.assertNotIn('Full', out)

    def test_class_over_40_member_functions_fails(self):
        path = self.edit('lib/flow/flow.h')
        path.write_text(path.read_text() + big_class('Big', 41))
        self.assert_fails('sizes', 'class Big: 41 member functions, lib/flow/flow.h line ', '(limit 40)')

    def test_listed_class_passes(self):
        path = self.edit('lib/flow/flow.h')
        path.write_text(path.read_text() + big_class('Big', 41))
        allow = self.root / 'scripts' / 'sizes.allow'
        allow.write_text(allow.read_text() + 'class Big\n')
        code, out = run('sizes', self.root)
        self.assertEqual(code, 0, out)
        self.assertIn('class Big: 41 member functions', out)
        self.assertIn('(known, in scripts/sizes.allow)', out)

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
