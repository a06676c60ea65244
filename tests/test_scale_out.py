"""Sharded runs for real: the shards of a small matrix, run as separate processes (as GitHub Actions
matrix jobs run them) and as a real Slurm job array on one node, merge into the verdicts a serial
run of the same matrix gives."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import diag

pytestmark = pytest.mark.slow

MATRIX = [
    "--case",
    "append_last",
    "--case",
    "dynamic_slice",
    "--backend",
    "eager",
    "--no-timing",
    "--new-tokens",
    "3",
    "--prompt-length",
    "8",
]


def _verdicts(db: Path, cwd: Path) -> dict[tuple, tuple]:
    listed = json.loads(diag("runs", "--db", str(db), "--json", "--limit", "100", cwd=cwd).stdout)
    verdicts = {
        (r["case"], r["fullgraph"]): (
            r["status"],
            r["graph_break_count"],
            r["recompile_count"],
            r["hidden_error_count"],
        )
        for r in listed
    }
    assert len(verdicts) == len(listed), "a row ran twice"
    return verdicts


@pytest.fixture(scope="module")
def serial(tmp_path_factory) -> dict[tuple, tuple]:
    work = tmp_path_factory.mktemp("serial")
    diag("run", *MATRIX, "--db", "serial.db", cwd=work)
    verdicts = _verdicts(work / "serial.db", work)
    assert len(verdicts) == 4 and {v[0] for v in verdicts.values()} >= {"pass", "fullgraph_error"}
    return verdicts


def test_shards_run_as_separate_jobs_merge_into_the_serial_verdicts(serial, tmp_path):
    """Planned once (diag plan --out), each worker runs its share of the file, side by side."""
    diag("plan", "--part", " ".join(MATRIX), "--shards", "2", "--out", "plan.json", cwd=tmp_path)
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "diag", "run", "--plan", "plan.json", "--shard", f"{k}/2", "--db", f"shard-{k}.db"],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for k in range(2)
    ]
    for worker in workers:
        out, err = worker.communicate(timeout=600)
        assert worker.returncode == 0, out + err
        assert "shard " in err and "2 runs of the matrix" in err
    diag("merge", "merged.db", "shard-0.db", "shard-1.db", cwd=tmp_path)
    assert _verdicts(tmp_path / "merged.db", tmp_path) == serial


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


SLURM_TOOLS = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol")


@pytest.fixture
def slurm(tmp_path):
    """A one-node Slurm cluster of this machine (Debian's slurm-wlm and munge, which .ci/run installs):
    munged, slurmctld and slurmd on private sockets, ports and directories, shut down afterwards."""
    missing = [tool for tool in SLURM_TOOLS if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"Slurm not installed (no {', '.join(missing)}): .ci/run installs slurm-wlm and munge")
    if os.geteuid() != 0:
        pytest.skip("slurmd runs jobs as their users: the one-node cluster needs root")
    root = tmp_path / "slurm"
    for name in ("state", "spool", "munge"):
        (root / name).mkdir(parents=True)
    (root / "munge").chmod(0o700)
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    sock = root / "munge" / "sock"
    subprocess.run(
        ["munged", "--force", f"--socket={sock}", f"--key-file={key}", f"--log-file={root / 'munge' / 'log'}"]
        + [f"--pid-file={root / 'munge' / 'pid'}", f"--seed-file={root / 'munge' / 'seed'}"],
        check=True,
    )
    host = socket.gethostname().split(".")[0]
    conf = root / "slurm.conf"
    conf.write_text(
        "\n".join(
            [
                "ClusterName=diagtest",
                f"SlurmctldHost={host}",
                "SlurmUser=root",
                "SlurmdUser=root",
                f"SlurmctldPort={_free_port()}",
                f"SlurmdPort={_free_port()}",
                "AuthType=auth/munge",
                "CredType=cred/munge",
                f"AuthInfo=socket={sock}",
                f"StateSaveLocation={root / 'state'}",
                f"SlurmdSpoolDir={root / 'spool'}",
                f"SlurmctldPidFile={root / 'slurmctld.pid'}",
                f"SlurmdPidFile={root / 'slurmd.pid'}",
                f"SlurmctldLogFile={root / 'slurmctld.log'}",
                f"SlurmdLogFile={root / 'slurmd.log'}",
                "ProctrackType=proctrack/linuxproc",
                "TaskPlugin=task/none",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_CPU",
                "ReturnToService=2",
                "MpiDefault=none",
                "JobAcctGatherType=jobacct_gather/none",
                "AccountingStorageType=accounting_storage/none",
                f"NodeName={host} CPUs={os.cpu_count()} State=UNKNOWN",
                "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
            ]
        )
        + "\n"
    )
    environ = {**os.environ, "SLURM_CONF": str(conf)}
    try:
        subprocess.run(["slurmctld", "-f", str(conf)], check=True, env=environ)
        subprocess.run(["slurmd", "-f", str(conf)], check=True, env=environ)
        for _ in range(60):
            state = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, env=environ)
            if state.stdout.strip() == "idle":
                break
            time.sleep(0.5)
        else:
            pytest.fail(f"the one-node cluster did not come up: {state.stdout}{state.stderr}")
        yield environ
    finally:
        subprocess.run(["scontrol", "shutdown"], env=environ, capture_output=True)
        subprocess.run(["munged", "--stop", f"--socket={sock}"], capture_output=True)


def test_a_slurm_job_array_runs_the_shards_and_merges_into_the_serial_verdicts(serial, slurm, tmp_path):
    """`sbatch --array=0-3` of `diag run --shard auto`: each task reads its share from Slurm's variables."""
    script = tmp_path / "shards.sh"
    script.write_text(
        "#!/bin/bash\nset -e\n"
        f"{sys.executable} -m diag run {' '.join(MATRIX)} --shard auto --db shard-$SLURM_ARRAY_TASK_ID.db\n"
    )
    done = subprocess.run(
        ["sbatch", "--parsable", "--wait", "--array=0-3", f"--chdir={tmp_path}", f"--output={tmp_path}/task-%a.log"]
        + [str(script)],
        capture_output=True,
        text=True,
        env=slurm,
        timeout=900,
    )
    logs = "".join(path.read_text() for path in sorted(tmp_path.glob("task-*.log")))
    assert done.returncode == 0, done.stdout + done.stderr + logs
    for task in range(4):
        assert f"shard {task}/4: 1 runs of the matrix" in logs
    shards = sorted(str(path) for path in tmp_path.glob("shard-*.db"))
    assert len(shards) == 4
    diag("merge", "merged.db", *shards, cwd=tmp_path)
    assert _verdicts(tmp_path / "merged.db", tmp_path) == serial
