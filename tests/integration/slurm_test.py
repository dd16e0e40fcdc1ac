#!/usr/bin/env python3
"""Sluice under Slurm: a one-node cluster of this machine, from Debian's packages (munged,
slurmctld, slurmd), configured in a temporary directory on free ports. srun --mpi=pmix starts
the all-to-all test program (PMIx chosen, ledger clean; and, as docs/launching.md says, each
rank's counters written at exit to a file that sluice-stats adds up), and sbatch runs a job
script that runs sluice-perf under srun, as a user would. Every daemon is stopped by pid afterwards, and
whatever they started (found by a marker in its environment), also when a test fails."""
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import uuid

sys.path.insert(0, os.path.dirname(__file__))
from launcher_test import ALLTOALL, BUILD, STATS, check_stats_table, tagged_pids, wait_gone  # noqa: E402

PERF = os.path.join(BUILD, "perf/sluice-perf")
SLURM_CONF = """ClusterName=sluicetest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={dir}/munge.sock
SlurmUser=root
SlurmdUser=root
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Slurm(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="sluice-slurm-")
        cls.mark = "SLUICE_SLURM_TEST=%s" % uuid.uuid4().hex
        cls.daemons = []
        try:
            cls.start()
        except BaseException:
            cls.stop()
            raise

    @classmethod
    def start(cls):
        d = cls.dir
        os.chmod(d, 0o755)  # munged wants its socket's directories searchable by all
        for sub in ("state", "spool"):
            os.makedirs(os.path.join(d, sub))
        key = os.path.join(d, "munge.key")
        subprocess.run(["mungekey", "-c", "-k", key, "-b", "1024"], check=True, capture_output=True)
        os.chmod(key, 0o600)
        conf = os.path.join(d, "slurm.conf")
        with open(conf, "w") as f:
            f.write(SLURM_CONF.format(host=socket.gethostname().split(".")[0], dir=d, ctld_port=free_port(),
                                      d_port=free_port(), cpus=os.cpu_count()))
        cls.env = dict(os.environ, SLURM_CONF=conf)
        cls.env[cls.mark.split("=")[0]] = cls.mark.split("=")[1]
        cls.daemon(["munged", "-F", "--key-file=" + key, "--socket=" + os.path.join(d, "munge.sock"),
                    "--log-file=" + os.path.join(d, "munged.log"), "--pid-file=" + os.path.join(d, "munged.pid"),
                    "--seed-file=" + os.path.join(d, "munged.seed")])
        deadline = time.monotonic() + 10
        while not os.path.exists(os.path.join(d, "munge.sock")) and time.monotonic() < deadline:
            time.sleep(0.05)
        cls.daemon(["slurmctld", "-D", "-f", conf])
        cls.daemon(["slurmd", "-D", "-f", conf])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            r = subprocess.run(["sinfo", "-h", "-o", "%T"], env=cls.env, capture_output=True, text=True)
            if r.stdout.strip() == "idle":
                return
            if any(p.poll() is not None for p in cls.daemons):
                break
            time.sleep(0.2)
        raise RuntimeError("the Slurm node did not come up idle: %s\n%s" % (r.stdout + r.stderr, cls.logs()))

    @classmethod
    def daemon(cls, cmd):
        log = open(os.path.join(cls.dir, os.path.basename(cmd[0]) + ".out"), "w")
        cls.daemons.append(subprocess.Popen(cmd, env=cls.env, stdout=log, stderr=subprocess.STDOUT))
        log.close()

    @classmethod
    def logs(cls):
        out = ""
        for name in ("slurmctld.log", "slurmd.log", "slurmctld.out", "slurmd.out", "munged.out"):
            p = os.path.join(cls.dir, name)
            if os.path.exists(p):
                with open(p) as f:
                    out += "--- %s\n%s" % (name, f.read()[-2000:])
        return out

    @classmethod
    def stop(cls):
        for p in reversed(cls.daemons):  # slurmd, then slurmctld, then munged
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        # What the daemons started (slurmscriptd, slurmstepd, job steps) carries the marker.
        for pid in tagged_pids(cls.mark):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        wait_gone(cls.mark, 10)
        shutil.rmtree(cls.dir, ignore_errors=True)

    @classmethod
    def tearDownClass(cls):
        cls.stop()

    def test_srun_with_pmix_runs_the_all_to_all(self):
        r = subprocess.run(["srun", "--mpi=pmix", "--overcommit", "-n", "4", ALLTOALL, "500"],
                           env=dict(self.env, SLUICE_LOG_LEVEL="debug"), capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr + self.logs())
        self.assertEqual(r.stdout.count(" ok "), 4, r.stdout)
        self.assertEqual(r.stderr.count("SLUICE_BOOT=auto chose pmix"), 4, r.stderr)
        # PMIx says all four ranks are on this node: UCX's TCP is left out, no port opened.
        self.assertNotIn("UCX's TCP transport listens on", r.stderr)

    def test_srun_line_of_launching_md_writes_the_files_sluice_stats_adds_up(self):
        # docs/launching.md's srun line, each rank also printing its own counters at exit
        # (SLUICE_STATS=1) for the table to be checked against; --label tags those lines.
        with tempfile.TemporaryDirectory() as d:
            export = "ALL,SLUICE_STATS=1,SLUICE_STATS_TRIGGER=exit,SLUICE_STATS_DEST=file:%s/%%h-%%p.jsonl" % d
            r = subprocess.run(["srun", "--mpi=pmix", "--overcommit", "--label", "-n", "3", "--export=" + export,
                                ALLTOALL, "200"], env=self.env, capture_output=True, text=True, timeout=300)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr[-3000:] + self.logs())
            files = sorted(os.path.join(d, f) for f in os.listdir(d))
            self.assertEqual(len(files), 3, files)  # one a process
            s = subprocess.run([STATS] + files, capture_output=True, text=True, timeout=60)
        self.assertEqual(s.returncode, 0, s.stderr)
        self.assertIn("sluice-stats: counters of 3 ranks (each rank's engines at exit), from 3 file(s):", s.stdout)
        table = check_stats_table(self, s.stdout, r.stdout + r.stderr, r"^\s*(\d+): (.*)$", 3)
        self.assertGreaterEqual(table["am.msgs_sent"][0], 3 * 2 * 200)
        self.assertEqual(table["am.msgs_sent"][0], table["am.msgs_received"][0])

    def test_sbatch_job_runs_sluice_perf_under_srun(self):
        script = os.path.join(self.dir, "job.sh")
        out = os.path.join(self.dir, "job.out")
        with open(script, "w") as f:
            f.write("#!/bin/bash\n#SBATCH -n 2\n#SBATCH --overcommit\n#SBATCH -o %s\n"
                    "srun --mpi=pmix %s -t am_lat,rpc_lat -s 8 -n 2000 -r 1 --format csv\n" % (out, PERF))
        r = subprocess.run(["sbatch", "--wait", script], env=self.env, capture_output=True, text=True, timeout=300)
        with open(out) as f:
            text = f.read()
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr + text + self.logs())
        rows = [l.split(",") for l in text.splitlines() if l.startswith(("am_lat,", "rpc_lat,"))]
        self.assertEqual([row[0] for row in rows], ["am_lat", "rpc_lat"], text)
        for row in rows:
            self.assertGreater(float(row[4]), 0, row)  # lat_p50_us


if __name__ == "__main__":
    unittest.main(verbosity=2)
