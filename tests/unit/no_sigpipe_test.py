#!/usr/bin/env python3
"""No write to a socket in lib/, apps/ or perf/ (but its raw socket benchmarks) can raise SIGPIPE: every send(), sendmsg() and
sendto() passes MSG_NOSIGNAL, and every write()/writev() is one of the few below, whose file
descriptor is never a socket (a rank whose peer vanished then gets EPIPE, not death by
signal: a job once ended with status 141 that way)."""
import os
import re
import sys
import unittest

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "../.."))
# (file, text of the call's line): writes to files, pipes and eventfds, not sockets.
NOT_SOCKETS = {
    ("lib/door/auth.cpp", "::write(fd, hex"): "the new key file",
    ("lib/am/live_stats.cpp", "::write(fd_,"): "the stats file or stderr",
    ("lib/core/fault.cpp", "write(STDERR_FILENO"): "stderr",
    ("lib/transport/fake_fabric.cpp", "::write(w->efd"): "an eventfd",
    ("apps/sluice-run/main.cpp", "::write(fd, s.data()"): "the launcher's stdout/stderr and token pipes",
    ("perf/bench.h", "Figures write(Engine& e"): "not a system call: sluice-perf's write test",
    ("perf/mpi_baseline.cpp", "::write(2, kFailed"): "the mpirun job's output pipe, before exec",
}
# The system calls: ::send() and friends as the sources write them, and write() with or without ::.
CALL = re.compile(r"(?<![\w:.>])(?:::(send|sendmsg|sendto)|(?:::)?(write|writev|pwrite))\s*\(")


def calls():
    for top in ("lib", "apps", "perf"):
        for root, _, files in os.walk(os.path.join(SRC, top)):
            if root.startswith(os.path.join(SRC, "perf", "micro")):
                continue  # benchmarks of raw socket calls themselves, not ranks
            for name in files:
                if not name.endswith((".cpp", ".h")):
                    continue
                path = os.path.join(root, name)
                rel = os.path.relpath(path, SRC)
                text = open(path).read()
                for m in CALL.finditer(text):
                    line_start = text.rfind("\n", 0, m.start()) + 1
                    line = text[line_start:text.find("\n", m.start())]
                    if line.lstrip().startswith("//"):
                        continue
                    # A declaration or a member call (x.send(...), p->write(...)) is not a syscall.
                    before = text[line_start:m.start()].rstrip()
                    if re.search(r"(Result|Status|void|auto|PostResult|bool)\s*(\w+::)?$", before):
                        continue
                    # The call's arguments, to its closing parenthesis.
                    depth, i = 0, m.end() - 1
                    while i < len(text):
                        depth += {"(": 1, ")": -1}.get(text[i], 0)
                        if depth == 0:
                            break
                        i += 1
                    yield rel, m.group(1) or m.group(2), line.strip(), text[m.end():i]


class NoSigpipe(unittest.TestCase):
    def test_every_socket_write_passes_msg_nosignal(self):
        found = 0
        for rel, fn, line, args in calls():
            if fn in ("send", "sendmsg", "sendto"):
                found += 1
                self.assertIn("MSG_NOSIGNAL", args, "%s: %s() without MSG_NOSIGNAL: %s" % (rel, fn, line))
            else:
                if not any(rel == f and t in line for f, t in NOT_SOCKETS):
                    self.fail("%s: %s() may meet a socket and raise SIGPIPE; use send(..., MSG_NOSIGNAL) "
                              "or list it in NOT_SOCKETS with what it writes to: %s" % (rel, fn, line))
        self.assertGreaterEqual(found, 3, "the scan found too few send() calls to be looking at the sources")


if __name__ == "__main__":
    unittest.main(verbosity=2)
