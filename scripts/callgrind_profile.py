"""Reads callgrind's output files (format version 1, events Ir): each function's self cost
and how often it was called, with the sums per object group that scripts/instructions
reports. Used by scripts/instructions and tests/unit/instructions_test.py.

A process dumped in parts (--dump-before/--dump-after) writes one file per part, and the
names callgrind compresses into "(id)" stay defined from one part to the next: read the parts
in order with one Names.
"""
import os
import re

# Object groups, first match wins: Sluice's library, UCX (libucp, libuct and its transport
# modules, libucs, libucm), glibc, the benchmark program itself; the rest is "other".
GROUPS = [
    ("sluice", re.compile(r"^libsluice[^/]*\.so")),
    ("ucx", re.compile(r"^libuc[ptsm][^/]*\.so")),
    ("libc", re.compile(r"^libc[.-][^/]*so")),
    ("bench", re.compile(r"^sluice-perf$")),
]
GROUP_NAMES = [g for g, _ in GROUPS] + ["other"]


def group_of(obj):
    """The group of an object file (a path or a base name)."""
    base = os.path.basename(obj or "")
    for name, pattern in GROUPS:
        if pattern.search(base):
            return name
    return "other"


class Names:
    """callgrind's name compression: "(12) name" defines id 12, "(12)" refers to it. Objects,
    files and functions are numbered separately."""

    def __init__(self):
        self.table = {}

    def resolve(self, kind, text):
        m = re.match(r"\((\d+)\)\s*(.*)$", text.strip())
        if not m:
            return text.strip()
        key = (kind, m.group(1))
        if m.group(2):
            self.table[key] = m.group(2)
        elif key not in self.table:
            raise ValueError("callgrind file refers to %s id %s before naming it" % (kind, m.group(1)))
        return self.table[key]


class Profile:
    """Self cost (Ir) and calls received per (object base name, function)."""

    def __init__(self):
        self.self_cost = {}
        self.calls = {}
        self.total = 0
        self.trigger = ""
        self.part = 1
        self.pid = 0

    def add(self, other):
        for k, v in other.self_cost.items():
            self.self_cost[k] = self.self_cost.get(k, 0) + v
        for k, v in other.calls.items():
            self.calls[k] = self.calls.get(k, 0) + v
        self.total += other.total
        return self

    def by_group(self):
        out = dict.fromkeys(GROUP_NAMES, 0)
        for (obj, _), ir in self.self_cost.items():
            out[group_of(obj)] += ir
        return out

    def calls_to(self, function):
        """Calls to every function named `function` (any object)."""
        return sum(n for (_, fn), n in self.calls.items() if fn == function)


_KINDS = {"ob": "ob", "cob": "ob", "fl": "fl", "fi": "fl", "fe": "fl", "cfi": "fl", "cfl": "fl", "fn": "fn",
          "cfn": "fn"}


def parse(path, names=None):
    """One callgrind output file as a Profile. `names` carries the compressed names from the
    earlier parts of the same process."""
    names = names if names is not None else Names()
    prof = Profile()
    ob = fn = cob = cfn = None
    after_calls = False  # the cost line after calls= is the call's inclusive cost
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line[0] == "#":
                continue
            c = line[0]
            if c.isdigit() or c in "+-*":
                if after_calls:
                    after_calls = False
                    continue
                fields = line.split()
                ir = int(fields[1]) if len(fields) > 1 else 0
                key = (os.path.basename(ob or "?"), fn or "?")
                prof.self_cost[key] = prof.self_cost.get(key, 0) + ir
                continue
            key, _, value = line.partition("=")
            if key in _KINDS and _:
                name = names.resolve(_KINDS[key], value)
                if key == "ob":
                    ob = name
                elif key == "fn":
                    fn = name
                elif key == "cob":
                    cob = name
                elif key == "cfn":
                    cfn = name
            elif line.startswith("calls="):
                target = (os.path.basename((cob if cob is not None else ob) or "?"), cfn or "?")
                prof.calls[target] = prof.calls.get(target, 0) + int(line[6:].split()[0])
                cob = None
                after_calls = True
            elif line.startswith("totals:") or line.startswith("summary:"):
                prof.total = int(line.split()[1])
            elif line.startswith("part:"):
                prof.part = int(line.split()[1])
            elif line.startswith("pid:"):
                prof.pid = int(line.split()[1])
            elif line.startswith("desc: Trigger:"):
                prof.trigger = line[len("desc: Trigger:"):].strip()
    if sum(prof.self_cost.values()) != prof.total:
        raise ValueError("%s: self costs add up to %d, its totals line says %d" %
                         (path, sum(prof.self_cost.values()), prof.total))
    return prof


def parse_parts(paths):
    """The parts of one process (any order) as Profiles, in part order, sharing names."""
    names = Names()
    ordered = sorted(paths, key=_part_number)
    return [parse(p, names) for p in ordered]


def _part_number(path):
    with open(path) as f:
        for line in f:
            if line.startswith("part:"):
                return int(line.split()[1])
            if line.startswith("events:"):
                break
    return 1


def short_function(fn):
    """A C++ function name without its parameter list and clone suffix, for tables."""
    fn = re.sub(r" \[clone [^\]]*\]", "", fn).replace("(anonymous namespace)", "{anon}")
    depth = 0
    for i, ch in enumerate(fn):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0 and i > 0 and not fn[:i].endswith("operator"):
            return fn[:i]
    return fn
