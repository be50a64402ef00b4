"""The SLURM launcher against a real controller: slurmctld and slurmd on this host (``launch/local_slurm.sh``).

``.ci/run`` starts the cluster when it runs as root and exports ``SLURM_CONF``; elsewhere these tests skip with
the reason (start one with ``sudo bash launch/local_slurm.sh start`` and export what it prints). The cluster has
one node with this machine's cores and no GPU and no accounting database, like many small CPU clusters. What the
stdlib fakes in ``fake_slurm/`` cannot show is tested here: sbatch's own checks, job arrays throttled by
``array_parallelism``, srun's ranks, signals delivered by slurmd, ``scontrol requeue``, ``scancel``.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import TINY, run_cli
from tests.launch.test_launchers import (
    RUN_TIMEOUT_S,
    assert_resumed_not_restarted,
    env_steps_logged,
    kill_tree,
    read_json,
    sbatch_flags,
    start_train,
    train,
)

pytestmark = [pytest.mark.slow, pytest.mark.slurm]
CPU_JOB = ["hydra/launcher=slurm_cpu", "hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=1"]


def _cluster_state() -> str | None:
    if shutil.which("sinfo") is None:
        return None
    try:
        done = subprocess.run(["sinfo", "-h", "-N", "-o", "%t"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.split()[0] if done.returncode == 0 and done.stdout.split() else None


@pytest.fixture(scope="module")
def slurm() -> None:
    state = _cluster_state()
    if state not in ("idle", "mix", "alloc"):
        pytest.skip("no SLURM controller answers here (sinfo: "
                    f"{state or 'none'}); start one with `sudo bash launch/local_slurm.sh start` and export the "
                    "SLURM_CONF it prints (.ci/run does this when it runs as root)")


@pytest.fixture(autouse=True)
def _nothing_left_running(slurm, tmp_path):
    """Cancel the jobs a failed test left behind, so the next test finds the node free: only the jobs submitted
    from this test's ``tmp_path`` (the other xdist worker runs its own SLURM tests at the same time)."""
    yield
    jobs = jobs_submitted_from(tmp_path)
    if jobs:
        subprocess.run(["scancel", *jobs], check=False)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and jobs_submitted_from(tmp_path):
        time.sleep(0.5)


def jobs_submitted_from(folder: Path) -> list[str]:
    """This user's pending, running or completing jobs whose working directory (sbatch's) is ``folder`` or below."""
    listed = subprocess.run(["squeue", "--me", "-h", "-t", "PD,R,CG", "-o", "%i %Z"], capture_output=True,
                            text=True).stdout
    rows = (line.split(" ", 1) for line in listed.splitlines() if " " in line)
    return [job for job, workdir in rows if Path(workdir).is_relative_to(folder)]


def job_ids(sweep: Path) -> list[str]:
    """The SLURM job ids of a sweep's jobs (``<array>_<task>`` for arrays), from submitit's folders."""
    names = sorted(p.name for p in (sweep / ".submitit").iterdir() if re.fullmatch(r"\d+(_\d+)?", p.name))
    return [n for n in names if "_" in n] or names  # an array's own folder holds only its submission script


def wait_for_iterations(proc: subprocess.Popen, run_dir: Path, iterations: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the sweep ended (rc {proc.returncode}) too early:\n{out}\n{err}")
        if len(env_steps_logged(run_dir)) >= iterations:
            return
        time.sleep(0.1)
    pytest.fail(f"no {iterations} iterations logged in {run_dir} within {timeout} s")


def release_when_requeued(job: str, timeout: float = 60) -> None:
    """SLURM holds a requeued batch job for 120 s (its BeginTime); start it now instead, as an admin may
    (``scontrol update StartTime=now``), so that the test does not wait for the hold.

    Not in the second of the requeue: the requeue revokes the job's launch credential, and slurmd refuses a
    credential created in the same second as the revocation (whole-second timestamps), killing the job
    ("Killing non-startable batch JobId=...: Job credential revoked") without a result.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        queued = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T %r"], capture_output=True, text=True).stdout
        if "BeginTime" in queued:
            time.sleep(2)
            subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], check=True)
            return
        time.sleep(0.2)
    pytest.fail(f"job {job} was not requeued within {timeout} s")


# --- before submission: what sinfo can tell ---------------------------------------------------------------
@pytest.mark.parametrize(("overrides", "fragments"), [
    (["hydra/launcher=slurm"], ["hydra.launcher.gpus_per_node=1", "0 GPUs",
                                "Fix: pass hydra.launcher.gpus_per_node=null", "hydra/launcher=slurm_cpu"]),
    ([*CPU_JOB, "hydra.launcher.partition=gpu"], ["hydra.launcher.partition='gpu'", "one of debug",
                                                  "Fix: pass hydra.launcher.partition=debug"]),
    ([*CPU_JOB, "hydra.launcher.mem_gb=100000"], ["hydra.launcher.mem_gb=100000", "MB",
                                                  "Fix: pass hydra.launcher.mem_gb="]),
    ([*CPU_JOB, "hydra.launcher.cpus_per_task=4096"], ["hydra.launcher.cpus_per_task=4096", "Fix: pass "
                                                       f"hydra.launcher.cpus_per_task={os.cpu_count()}"]),
])
def test_a_request_no_node_can_serve_is_refused_before_submission(tmp_path, overrides, fragments):
    result = train(["-m", *overrides, "seed=0,1", *TINY, f"hydra.sweep.dir={tmp_path / 'sweep'}"], cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("embodirl-train: error:")]
    assert "Traceback" not in result.stderr and all(f in line for f in fragments), line
    assert not (tmp_path / "sweep" / ".submitit").exists()  # nothing was submitted
    fix = line.split("Fix: pass ", 1)[1].split(" (")[0].rstrip(".").split()
    followed = train(["-m", *overrides, *fix, "seed=0", *TINY, f"hydra.sweep.dir={tmp_path / 'fixed'}"],
                     cwd=tmp_path)
    assert followed.returncode == 0, followed.stdout + followed.stderr  # the fix works when followed


# --- a sweep as one job array, throttled --------------------------------------------------------------------
def test_sweep_is_one_array_and_array_parallelism_holds(tmp_path):
    sweep = tmp_path / "sweep"
    result = train(["-m", *CPU_JOB, "hydra.launcher.array_parallelism=1", "seed=0,1,2", *TINY,
                    f"hydra.sweep.dir={sweep}"], cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 of 3 jobs completed" in result.stdout + result.stderr
    assert "Bypassing sacct error" not in result.stderr and "accounting storage is disabled" not in result.stderr
    ids = job_ids(sweep)
    assert len({i.split("_")[0] for i in ids}) == 1 and len(ids) == 3  # one array, three tasks
    array = ids[0].split("_")[0]
    script = (sweep / ".submitit" / array / f"{array}_submission.sh").read_text()
    assert sbatch_flags(script)["array"] == "0-2%1"
    spans = sorted((read_json(sweep / str(k) / "status.json")["started_at"],
                    read_json(sweep / str(k) / "status.json")["updated_at"]) for k in range(3))
    assert all(end <= nxt_start for (_, end), (nxt_start, _) in itertools.pairwise(spans))  # one at a time
    for k in range(3):
        assert read_json(sweep / str(k) / "status.json")["status"] == "completed"
        steps = env_steps_logged(sweep / str(k))
        assert steps == sorted(set(steps)) and steps  # nothing lost or duplicated


# --- one job, two srun tasks (gloo on CPU), one run directory ------------------------------------------------
def test_two_tasks_train_one_run_with_identical_ranks(tmp_path):
    sweep = tmp_path / "sweep"
    result = train(["-m", *CPU_JOB, "hydra.launcher.tasks_per_node=2", *TINY, f"hydra.sweep.dir={sweep}"],
                   cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir = sweep / "0"
    summary = read_json(run_dir / "summary.json")
    assert summary["distributed"] == {"world_size": 2, "params_identical": True, "data_distinct": True}
    status = read_json(run_dir / "status.json")
    assert status["status"] == "completed" and status["job"]["SLURM_JOB_ID"]
    assert "rank 1 of 2" in (run_dir / "train.rank1.log").read_text()


# --- preemption: a signal from SLURM, then scontrol requeue, then a resume from last.pt ----------------------
def test_preempted_by_signal_requeued_and_resumed(tmp_path):
    sweep, total = tmp_path / "sweep", 8192
    run_dir = sweep / "0"
    proc = start_train(["-m", *CPU_JOB, *TINY, f"trainer.total_env_steps={total}", "eval.every_env_steps=4096",
                        "trainer.checkpoint_every_env_steps=1024", f"hydra.sweep.dir={sweep}"], cwd=tmp_path)
    try:
        wait_for_iterations(proc, run_dir, 3)
        (job,) = job_ids(sweep)
        first_pid = read_json(run_dir / "status.json")["pid"]
        subprocess.run(["scancel", "--signal=USR2", job], check=True)
        release_when_requeued(job)
        out, err = proc.communicate(timeout=RUN_TIMEOUT_S)
    finally:
        kill_tree(proc)
    assert proc.returncode == 0, out + err
    status = read_json(run_dir / "status.json")
    assert status["status"] == "completed" and status["attempt"] == 2 and status["pid"] != first_pid
    assert_resumed_not_restarted(run_dir, total, per_iteration=8 * 16)
    logs = "".join(p.read_text() for p in (sweep / ".submitit").glob("*/*_log.*"))
    assert "Requeued job" in logs


# --- a job over its time limit: requeued max_num_timeout times, then reported ----------------------------------
def test_job_over_its_time_limit_is_requeued_up_to_max_num_timeout(tmp_path):
    sweep = tmp_path / "sweep"
    run_dir = sweep / "0"
    # slurmctld sends USR2 at the first tick of its 30-s timer with under signal_delay_s + 30 s left: 20-50 s into
    # a 1-minute job for 10 s (30 s allowed the first second, before the run had logged or saved anything)
    proc = start_train(["-m", *CPU_JOB, "hydra.launcher.timeout_min=1", "hydra.launcher.signal_delay_s=10",
                        "hydra.launcher.max_num_timeout=1", *TINY, "trainer.total_env_steps=100000000",
                        "trainer.stop_on_solved=false", "trainer.checkpoint_every_env_steps=1024",
                        f"hydra.sweep.dir={sweep}"], cwd=tmp_path)
    try:
        wait_for_iterations(proc, run_dir, 1)
        (job,) = job_ids(sweep)
        release_when_requeued(job, timeout=120)
        out, err = proc.communicate(timeout=150)
    finally:
        kill_tree(proc)
    assert proc.returncode == 1, out + err
    assert "timed-out too many times" in err and "job 0 [" in err, err
    status = read_json(run_dir / "status.json")
    assert status["attempt"] == 2 and status["status"] != "running"
    assert "resumed from" in (run_dir / "train.log").read_text()
    steps = env_steps_logged(run_dir)
    assert steps == sorted(set(steps)) and steps  # the second attempt continued; nothing logged twice


# --- scancel of a running job: the sweep ends and says so (without accounting, it used to wait for ever) -----
def test_cancelled_job_ends_the_sweep_and_is_reported(tmp_path):
    sweep = tmp_path / "sweep"
    run_dir = sweep / "0"
    proc = start_train(["-m", *CPU_JOB, *TINY, "trainer.total_env_steps=100000000", "trainer.stop_on_solved=false",
                        f"hydra.sweep.dir={sweep}"], cwd=tmp_path)
    try:
        wait_for_iterations(proc, run_dir, 2)
        (job,) = job_ids(sweep)
        subprocess.run(["scancel", job], check=True)
        out, err = proc.communicate(timeout=90)
    finally:
        kill_tree(proc)
    assert proc.returncode not in (0, None), out + err
    assert "Traceback" not in err, err
    assert re.search(r"job 0 .*cancel", err, flags=re.IGNORECASE), err
    # scancel sends SIGTERM first: the run saves checkpoints/last.pt and records itself preempted (a rerun continues)
    status = read_json(run_dir / "status.json")["status"]
    assert status == "preempted", status
    steps = env_steps_logged(run_dir)
    assert steps == sorted(set(steps))
    report = run_cli("embodirl-report", [str(sweep)], cwd=tmp_path)
    assert "preempted" in report.stdout and "running" not in report.stdout, report.stdout


# --- a job that fails inside SLURM ---------------------------------------------------------------------------
def test_failing_job_is_named_and_the_others_complete(tmp_path):
    sweep = tmp_path / "sweep"
    result = train(["-m", *CPU_JOB, "algo.learning_rate=1e-3,-1", *TINY, f"hydra.sweep.dir={sweep}"],
                   cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 of 2 sweep jobs did not complete" in result.stderr
    assert re.search(r"job 1 \[[^\]]*algo\.learning_rate=-1[^\]]*\] failed: ConfigError", result.stderr)
    assert read_json(sweep / "0" / "status.json")["status"] == "completed"
    assert read_json(sweep / "1" / "status.json")["status"] == "failed"
