#!/usr/bin/env python3
"""The C API's and the Fortran module's examples as real jobs: ping (C, Fortran) and rpc (C)
under sluice-run -n 2 and under mpirun; rpc in client/server mode (listen, connect) with the C
and the Fortran client, against the C and the Fortran server; the Fortran client of the C server
and both clients of the Fortran server as the two ranks of one job; and the C, Fortran and C++
pings as the two ranks of one job in every pairing (they speak one protocol). Every process runs
under a watchdog (timeout)."""
import os
import re
import shutil
import subprocess
import unittest

BUILD = os.environ.get("TEST_BUILD_DIR", os.path.join(os.path.dirname(__file__), "../../build"))
RUN = os.path.join(BUILD, "apps/sluice-run")
EXAMPLES = os.path.join(BUILD, "apps/examples")
PING = {name: os.path.join(EXAMPLES, exe) for name, exe in (("c", "ping_c"), ("cpp", "ping"), ("fortran", "ping_f"))}
RPC = os.path.join(EXAMPLES, "rpc_c")
RPC_F = os.path.join(EXAMPLES, "rpc_client_f")
RPC_SERVER_F = os.path.join(EXAMPLES, "rpc_server_f")
CLIENT_SAYS = {RPC: "rpc_c: 101 calls answered, error, deadline and cancel as expected",
               RPC_F: "rpc_client_f: 101 calls answered, error and unknown method as expected"}
# Both clients make 101 echo calls (100, then one into a reply buffer).
SERVER_F_SAYS = "rpc_server_f: served 101 echo calls"
WATCHDOG = 120
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def run(args, env=None, timeout=WATCHDOG):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run(args, env=e, capture_output=True, text=True, timeout=timeout)


def by_rank(rank0, rank1, *args):
    """A command that runs `rank0` as rank 0 and `rank1` as the other rank (sluice-run sets
    SLUICE_RANK in each process)."""
    rest = " ".join(args)
    return ["sh", "-c", f'if [ "$SLUICE_RANK" = 0 ]; then exec {rank0} {rest}; else exec {rank1} {rest}; fi']


class Examples(unittest.TestCase):
    def setUp(self):
        for path in list(PING.values()) + [RPC, RPC_F, RPC_SERVER_F, RUN]:
            if not os.path.exists(path):
                self.skipTest(f"{path} is not built (no C or Fortran compiler?)")

    def test_c_ping_under_sluice_run(self):
        r = run([RUN, "-n", "2", PING["c"], "2000", "64"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertRegex(r.stdout, r"ping_c: 2000 round trips of 64 bytes, [0-9.]+ us one way")

    def test_c_ping_alone_is_refused_clearly(self):
        r = run([PING["c"], "10"])
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("ping_c: run with two ranks", r.stderr)

    def test_fortran_ping_under_sluice_run(self):
        r = run([RUN, "-n", "2", PING["fortran"], "2000"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("ping_f: 2000 round trips of 8 bytes", r.stdout)

    def test_c_rpc_under_sluice_run(self):
        r = run([RUN, "-n", "2", RPC])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("rpc_c: 101 calls answered, error, deadline and cancel as expected", r.stdout)
        # The server held two requests until the stop and answered them: nothing left behind.
        self.assertNotIn("still holds", r.stderr)

    def test_fortran_client_of_the_c_server_under_sluice_run(self):
        r = run([RUN, "-n", "2"] + by_rank(RPC, RPC_F))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("rpc_client_f: 101 calls answered, error and unknown method as expected", r.stdout)

    def test_c_and_fortran_clients_of_the_fortran_server_under_sluice_run(self):
        for client in (RPC, RPC_F):
            with self.subTest(client=os.path.basename(client)):
                r = run([RUN, "-n", "2"] + by_rank(RPC_SERVER_F, client))
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                self.assertIn(CLIENT_SAYS[client], r.stdout)
                self.assertIn(SERVER_F_SAYS, r.stdout)

    def test_c_rpc_client_server(self):
        for client in (RPC, RPC_F):
            with self.subTest(client=os.path.basename(client)):
                self.client_server(RPC, client)

    def test_fortran_rpc_server_client_server(self):
        for client in (RPC, RPC_F):
            with self.subTest(client=os.path.basename(client)):
                out = self.client_server(RPC_SERVER_F, client)
                self.assertIn(SERVER_F_SAYS, out)

    def client_server(self, server_exe, client):
        """Runs `client` against `server_exe` listening on a port of its own; returns the server's output."""
        server = subprocess.Popen([server_exe, "listen", "127.0.0.1:0"], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        with server:
            try:
                line = server.stdout.readline()
                m = re.match(r"listening on (\d+)", line)
                self.assertIsNotNone(m, line)
                r = run([client, "connect", "127.0.0.1:" + m.group(1)])
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                self.assertIn(CLIENT_SAYS[client], r.stdout)
                out, err = server.communicate(timeout=WATCHDOG)
                self.assertEqual(server.returncode, 0, err)
                return out
            finally:
                if server.poll() is None:
                    server.kill()
                    server.communicate()

    def test_every_pairing_of_c_fortran_and_cpp(self):
        for a in PING:
            for b in PING:
                if a == b:
                    continue
                with self.subTest(rank0=a, rank1=b):
                    r = run([RUN, "-n", "2"] + by_rank(PING[a], PING[b], "300"))
                    self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                    self.assertRegex(r.stdout, r"ping(_c|_f)?: 300 round trips")

    def test_under_mpirun(self):
        if shutil.which("mpirun") is None:
            self.skipTest("no mpirun")
        for cmd, out in (([PING["c"], "500"], "ping_c: 500 round trips"), ([PING["fortran"], "500"], "ping_f: 500"),
                         ([RPC], "rpc_c: 101 calls answered")):
            with self.subTest(cmd=cmd[0]):
                r = run(["mpirun", "-np", "2", "--oversubscribe", "--bind-to", "none"] + cmd, env=MPI_ENV)
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                self.assertIn(out, r.stdout)
        with self.subTest(cmd="rpc_server_f : rpc_c"):
            r = run(["mpirun", "--oversubscribe", "--bind-to", "none", "-np", "1", RPC_SERVER_F, ":", "-np", "1", RPC],
                    env=MPI_ENV)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn(CLIENT_SAYS[RPC], r.stdout)
            self.assertIn(SERVER_F_SAYS, r.stdout)


if __name__ == "__main__":
    unittest.main()
