"""What the fault tests share: peer_fault's three processes, started by hand with the file
bootstrap (no launcher ends the job when one dies), and the checks on rank 0's report."""
import glob
import os
import re
import socket
import struct
import subprocess
import tempfile
import time
import unittest

BUILD = os.environ.get("TEST_BUILD_DIR", os.path.join(os.path.dirname(__file__), "../../build"))
PROG = os.path.join(BUILD, "tests/peer_fault")
BLOCKSTORE = os.path.join(BUILD, "apps/examples/blockstore")
DOOR_CLIENT = os.path.join(BUILD, "tests/door_client")
# A gdb script that kills a process just after it claims an element of a shared-memory FIFO.
FIFO_WEDGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fifo_wedge.py")


def under_fifo_wedge(test, cmd, env, skip=0, hold=0):
    """Runs `cmd` under fifo_wedge.py, stopped just past claiming an element of a shared-memory
    FIFO after `skip` such sends: killed there, or with `hold` held for that many seconds and then
    let go. Returns (whether it claimed one, gdb's and the program's output); it did not when it
    ended without such a send (the server had put it on the stream). Skips `test` where gdb may
    not trace."""
    r = subprocess.run(["gdb", "-q", "-batch", "-x", FIFO_WEDGE, "--args"] + list(cmd), capture_output=True, text=True,
                       timeout=120, env=dict(env, FIFO_WEDGE_SKIP=str(skip), FIFO_WEDGE_HOLD=str(hold)))
    if "ptrace: Operation not permitted" in r.stdout + r.stderr:
        test.skipTest("gdb may not trace here (ptrace not permitted)")
    claimed = "fifo_wedge: claimed a FIFO element" in r.stdout
    test.assertTrue(claimed or "fifo_wedge: the program ended without" in r.stdout, r.stdout + r.stderr)
    return claimed, r.stdout + r.stderr


def wedge(test, cmd, env, skip=0):
    """Runs `cmd` killed just past claiming an element of a shared-memory FIFO (under_fifo_wedge);
    True when it was."""
    return under_fifo_wedge(test, cmd, env, skip)[0]


WATCHDOG = 120


def serve_blockstore(test, host, env, prefix=(), args=()):
    """Starts `blockstore serve [args] host:0` (after the command `prefix`), killed when `test`
    ends; returns the process and the port it serves on."""
    server = subprocess.Popen(list(prefix) + [BLOCKSTORE, "serve", *args, host + ":0"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    test.addCleanup(lambda: server.poll() is None and (server.kill(), server.communicate()))
    return server, int(re.search(r"port (\d+)", server.stdout.readline()).group(1))


def open_fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def posix_segments_held():
    """The POSIX shared-memory files (UCX's, in /dev/shm) some living process holds open: a
    segment's creator keeps its file open while the segment lives (others open it through
    /proc/<creator>/fd)."""
    held = set()
    for fd_dir in glob.glob("/proc/[0-9]*/fd"):
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            if target.startswith("/dev/shm/ucx_shm_posix"):
                held.add(target.split()[0])
    return held


def dead_segments(pid):
    """The shared memory segments process `pid` has mapped whose creator is gone: a dead peer's
    FIFO and receive buffers its transport kept. SysV: a mapping's inode in the maps is the
    segment id, and /proc/sysvipc/shm names each segment's creator. POSIX: a mapped file of
    /dev/shm that no process holds open. peer_fault.cpp counts the same."""
    with open("/proc/%d/maps" % pid) as f:
        lines = [line.split() for line in f]
    mapped = {int(fields[4]) for fields in lines if len(fields) > 5 and "SYSV" in fields[5]}
    posix = {fields[5] for fields in lines if len(fields) > 5 and fields[5].startswith("/dev/shm/ucx_shm_posix")}
    dead = []
    with open("/proc/sysvipc/shm") as f:
        next(f)
        for fields in (line.split() for line in f):
            shmid, creator = int(fields[1]), int(fields[4])
            if shmid in mapped and not os.path.exists("/proc/%d" % creator):
                dead.append(shmid)
    return dead + sorted(posix - posix_segments_held())


class FaultHarness(unittest.TestCase):
    """Starts peer_fault's three ranks with the file bootstrap and collects rank 0's result line;
    no tests of its own."""

    def start(self, mode, tls, extra, victim=None, args=(), rank_env=None, wrap=None):
        """Starts ranks 0-2 of `peer_fault mode args...`; `victim` is rank 1's extra environment,
        rank_env(rank) and wrap(rank) (a command prefix) each rank's own."""
        self.dir = tempfile.TemporaryDirectory()
        self.procs = []
        for rank in range(3):
            env = dict(os.environ, SLUICE_BOOT="file:" + self.dir.name, SLUICE_RANK=str(rank), SLUICE_SIZE="3",
                       SLUICE_TLS=tls, **extra)
            if rank == 1:
                env.update(victim or {})
            env.update(rank_env(rank) if rank_env else {})
            cmd = (wrap(rank) if wrap else []) + [PROG, mode] + list(args)
            self.procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                               text=True))
        # Wait for rank 1 to be up, and then let traffic flow a moment.
        line = self.procs[1].stdout.readline()
        self.assertIn("ready", line)
        time.sleep(0.7)

    def finish(self, kill_victim=False):
        """Rank 0's exit status and result fields, and its stderr. The other ranks are then
        waited for (rank 1 killed at once with kill_victim: one that rank 0 gave up on never
        hears the end); their exit statuses and output are left in self.rest."""
        out, err = self.procs[0].communicate(timeout=WATCHDOG)
        if kill_victim and self.procs[1].poll() is None:
            self.procs[1].kill()
        self.rest = {}
        for rank, p in enumerate(self.procs[1:], 1):
            if p.stdout.closed:  # already collected (a victim that ended itself)
                continue
            try:
                o, e = p.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                o, e = p.communicate()
            self.rest[rank] = (p.returncode, o, e)
        self.dir.cleanup()
        m = re.search(r"result (.*)", out)
        self.assertIsNotNone(m, out + err)
        fields = dict(kv.split("=") for kv in m.group(1).split())
        return self.procs[0].returncode, fields, err

    def check_failure_handled(self, rc, r, err, t_death, bound, held_call=False):
        """What rank 0 must see when rank 1 dies at t_death with operations in flight. With
        held_call (PEER_FAULT_HOLD_CALL=1), one of them is a call rank 1 never answers; without
        it, rank 0's sends must have been in flight."""
        self.assertEqual(rc, 0, "%s\n%s" % (r, err))
        self.assertEqual(r["dead"], "1")
        self.assertEqual(r["twice"], "0")
        if held_call:
            self.assertEqual(r["held_call"], "UNAVAILABLE", "the call in flight to rank 1 failed with Unavailable")
        else:
            self.assertGreater(int(r["failed1"]), 0, "operations in flight completed with Unavailable")
        self.assertGreater(int(r["to2_after"]), 2000, "the bystander's flow went on")
        self.assertLess(float(r["last_failure_wall"]) - t_death, bound,
                        "every operation towards the dead peer completed within the bound after the kill")
        self.assertEqual(r["held_send_slots"], "0")
        self.assertEqual(r["outstanding"], "0")
        self.assertEqual(r["posted_exact"], "0", "receives posted for the dead sender's payloads were cancelled")
        self.assertEqual(r["held_landing"], "0", "no receive slot stays held by a partial payload")
        self.assertEqual(r["misordered"], "0", "what rank 0 received from rank 1 came in order")
        self.assertEqual(r["dead_peer_segments"], "0", "no shared memory of the dead peer stays mapped: " +
                         " ".join(l for l in err.splitlines() if l.startswith("dead peer segment")))
        # Every buffer rank 0's sink handed out for the victim's payloads came back once: to the
        # handler, or, for a payload the victim's death cut off, to sink_release.
        self.assertEqual((r["sink_out"], r["sink_stray"]), ("0", "0"), r)
        print("sink buffers: %s given, %s delivered, %s given back" % (r["sink_given"], r["sink_delivered"],
                                                                      r["sink_returned"]))
        code, out, _ = self.rest[2]
        self.assertEqual(code, 0, "the bystander received everything in order: " + out)

    def tearDown(self):
        for p in getattr(self, "procs", []):
            if p.poll() is None:
                p.kill()
                p.wait()


def refusal(answer):
    """The (status code, reason) of the front door's REFUSE frame (kind 5): `answer` is (kind, body)."""
    assert answer is not None and answer[0] == 5, answer
    code, n = struct.unpack("<HH", answer[1][:4])
    return code, answer[1][8:8 + n].decode()


def closed(s, timeout=5.0):
    """Whether the server closes `s` within `timeout` (after whatever it still sends)."""
    s.settimeout(timeout)
    try:
        while s.recv(65536):
            pass
        return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False
