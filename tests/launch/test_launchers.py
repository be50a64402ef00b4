"""Launchers end to end: profiles, basic/submitit-local/fake-SLURM multiruns, ranks, preemption and requeue.

Every run uses the TINY settings; the runs that start processes are subprocesses with a timeout.
The SLURM path runs the real ``submitit_slurm`` launcher against the stdlib fakes in ``fake_slurm/``
(``sbatch`` runs the rendered script here, ``srun`` starts nodes x tasks_per_node ranks on this machine).
Preemption is simulated by sending SIGUSR2 to the training process (its pid is in ``status.json``) once
a few iterations are logged: once only, so the requeued attempt must resume and finish.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from tests.conftest import TINY, in_process_run

REPO = Path(__file__).resolve().parents[2]
FAKE_SLURM = Path(__file__).resolve().parent / "fake_slurm"
LAUNCHERS = sorted(p.stem for p in (REPO / "embodirl" / "conf" / "hydra" / "launcher").glob("*.yaml"))
SITE_PROFILES = sorted((REPO / "launch" / "hydra" / "launcher").glob("*.yaml"))
SITE_SWITCHES = sorted((REPO / "launch" / "site").glob("*.yaml"))
TARGETS = {"local": "hydra_plugins.embodirl_launcher.LocalLauncher",
           "slurm": "hydra_plugins.embodirl_launcher.SlurmLauncher"}
RUN_TIMEOUT_S = 150  # per subprocess; far more than a run here needs, so only a hang reaches it


# --- helpers ---------------------------------------------------------------------------------------------
def start_train(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """``embodirl-train <args>`` (as ``python -m``) in a new session, so its whole process tree can be killed."""
    return subprocess.Popen([sys.executable, "-m", "embodirl.cli.train", *args], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "WANDB_MODE": "offline", **(env or {})})


def kill_tree(proc: subprocess.Popen) -> None:
    """Kill the run and everything it started (submitit controllers, ranks) if anything is left."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def train(args: list[str], cwd: Path, env: dict[str, str] | None = None,
          timeout: float = RUN_TIMEOUT_S) -> subprocess.CompletedProcess:
    """Run ``embodirl-train <args>`` to the end (killing its process tree after ``timeout`` s)."""
    proc = start_train(args, cwd, env)
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        kill_tree(proc)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())


def env_steps_logged(run_dir: Path) -> list[int]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line)["env_steps"] for line in path.read_text().splitlines() if line.endswith("}")]


def preempt_after(proc: subprocess.Popen, run_dir: Path, iterations: int = 3, timeout: float = 90) -> int:
    """Once ``iterations`` are logged, SIGUSR2 the training process (rank 0; pid from status.json)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the run ended (rc {proc.returncode}) before it could be preempted:\n{out}\n{err}")
        if len(env_steps_logged(run_dir)) >= iterations:
            pid = read_json(run_dir / "status.json")["pid"]
            os.kill(pid, signal.SIGUSR2)
            return pid
        time.sleep(0.01)
    pytest.fail(f"no {iterations} iterations logged in {run_dir} within {timeout} s")


def assert_resumed_not_restarted(run_dir: Path, total: int, per_iteration: int) -> None:
    """metrics.jsonl holds each iteration once, in order: the second attempt continued the first."""
    steps = env_steps_logged(run_dir)
    assert steps == list(range(per_iteration, total + 1, per_iteration)), steps
    resumed = re.search(r"resumed from \S+last\.pt at env_steps=(\d+)", (run_dir / "train.log").read_text())
    assert resumed, "train.log does not say the run resumed"
    assert per_iteration <= int(resumed.group(1)) < total


def load_checkpoint_weights_only(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)


def sbatch_flags(script: str) -> dict[str, str | bool]:
    """``#SBATCH --key=value`` lines as {key: value} (True for bare flags)."""
    flags = {}
    for key, value in re.findall(r"^#SBATCH --([\w-]+)(?:=(.*))?$", script, re.MULTILINE):
        flags[key] = value if value else True
    return flags


def launcher_config(overrides: list[str]):
    with initialize_config_module("embodirl.conf", version_base="1.3"):
        return compose("train", overrides=overrides, return_hydra_config=True).hydra


def submitit_executor(launcher, folder: Path):
    """The executor exactly as hydra-submitit-launcher builds it (``BaseSubmititLauncher.launch``)."""
    import submitit
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf

    params = {k: v for k, v in OmegaConf.to_container(launcher, resolve=True).items() if k != "_target_"}
    kind = "slurm" if launcher._target_ == TARGETS["slurm"] else "local"
    init = {"folder": str(folder)}
    if "max_num_timeout" in params:
        init[f"{kind}_max_num_timeout"] = params["max_num_timeout"]
    base = set(OmegaConf.structured(BaseQueueConf).keys())
    executor = submitit.AutoExecutor(cluster=kind, **init)
    executor.update_parameters(**{k if k in base else f"{kind}_{k}": v for k, v in params.items()
                                  if k not in {"submitit_folder", "max_num_timeout"}})
    return executor


# --- a. every profile composes and is accepted by submitit ---------------------------------------------
@pytest.mark.parametrize("name", LAUNCHERS)
def test_launcher_profile_composes_and_renders(name, tmp_path, fake_slurm_path):
    launcher = launcher_config([f"hydra/launcher={name}"]).launcher
    kind = "slurm" if launcher._target_ == TARGETS["slurm"] else "local"
    assert launcher._target_ == TARGETS[kind]
    assert launcher.submitit_folder.endswith("/.submitit/%j")
    assert launcher.tasks_per_node >= 1 and launcher.nodes >= 1 and launcher.timeout_min > 0
    executor = submitit_executor(launcher, tmp_path / "submitit")  # raises on any parameter submitit rejects
    if kind == "local":
        assert launcher.nodes == 1  # submitit's local executor refuses more
        return
    assert launcher.max_num_timeout >= 1, "preemption requeues need max_num_timeout >= 1 (resume is tested)"
    assert 0 < launcher.signal_delay_s < launcher.timeout_min * 60
    if name == "slurm_multi_gpu":
        assert launcher.tasks_per_node == launcher.gpus_per_node, "one rank per GPU"
        assert launcher.nodes > 1
    flags = sbatch_flags(executor._executor._make_submission_file_text("true", "uid"))
    assert flags["signal"] == f"USR2@{launcher.signal_delay_s}"
    assert flags["time"] == str(launcher.timeout_min)
    assert flags["nodes"] == str(launcher.nodes) and flags["ntasks-per-node"] == str(launcher.tasks_per_node)
    if launcher.gpus_per_node is None:  # the CPU profile asks for no GPU at all
        assert "gpus-per-node" not in flags
    else:
        assert flags["gpus-per-node"] == str(launcher.gpus_per_node)
    assert flags["open-mode"] == "append"  # a requeued attempt appends to the same logs
    # CPU-only clusters without GRES reject any --gpus-per-node line: null leaves it out
    launcher.gpus_per_node = None
    cpu_only = submitit_executor(launcher, tmp_path / "cpu")._executor._make_submission_file_text("true", "u")
    assert "gpus-per-node" not in sbatch_flags(cpu_only)


@pytest.mark.parametrize("selection", [f"hydra/launcher={p.stem}" for p in SITE_PROFILES]
                         + [f"+site={p.stem}" for p in SITE_SWITCHES] or [None])
def test_site_profile_composes_from_the_launch_directory(selection, tmp_path, fake_slurm_path):
    """``--config-dir launch hydra/launcher=<site>`` (or ``+site=<site>``) yields a valid sbatch script."""
    if selection is None:
        pytest.skip("no site profile in launch/hydra/launcher/ or launch/site/")
    launcher = launcher_config([f"hydra.searchpath=[file://{REPO / 'launch'}]", selection]).launcher
    assert launcher._target_ == TARGETS["slurm"]
    assert launcher.max_num_timeout >= 1 and 0 < launcher.signal_delay_s < launcher.timeout_min * 60
    script = submitit_executor(launcher, tmp_path / "submitit")._executor._make_submission_file_text("true", "u")
    flags = sbatch_flags(script)
    for key in ("partition", "account", "qos"):
        if launcher[key] is not None:
            assert flags[key] == str(launcher[key])
    for key, value in launcher.additional_parameters.items():
        assert flags[key] == (True if value is True else str(value))  # `requeue: true` renders a bare --requeue
    setup = script.split("# setup\n", 1)[1].split("\n\n# command", 1)[0].splitlines() if launcher.setup else []
    assert setup == list(launcher.setup)


# --- b. basic launcher: in-process and as a subprocess -------------------------------------------------
@pytest.mark.slow  # a multirun (test_sweep keeps one in the fast tier)
def test_basic_multirun_in_process(tmp_path, monkeypatch):
    from embodirl.cli.train import main

    sweep = tmp_path / "sweep"
    monkeypatch.setattr(sys, "argv", ["embodirl-train", "-m", "seed=0,1", *TINY, f"hydra.sweep.dir={sweep}"])
    with in_process_run(RUN_TIMEOUT_S):
        main()  # SweepFate raises SystemExit(1) if a job did not complete
    for job in ("0", "1"):
        assert read_json(sweep / job / "status.json")["status"] == "completed"
        assert read_json(sweep / job / "summary.json")["env_steps"] == 256
    assert "seed=1" in (sweep / "1" / ".hydra" / "overrides.yaml").read_text()


@pytest.mark.slow
def test_basic_multirun_subprocess(tmp_path):
    sweep = tmp_path / "sweep"
    result = train(["-m", "seed=0,1", *TINY, f"hydra.sweep.dir={sweep}"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "2 of 2 jobs completed" in result.stdout + result.stderr
    for job in ("0", "1"):
        assert read_json(sweep / job / "status.json")["status"] == "completed"
        assert (sweep / job / "checkpoints" / "last.pt").is_file()


# --- c + g. submitit local launcher: concurrent points, a failing point fails the sweep ------------------
@pytest.mark.slow
def test_local_launcher_sweep_completes_points_and_names_the_failed_one(tmp_path):
    sweep = tmp_path / "sweep"
    # -1 is a bad learning rate: that job fails inside the submitit task, which submitit itself reports as
    # "Job completed successfully"; SweepFate must still fail the command and name it
    result = train(["-m", "hydra/launcher=local", "algo.learning_rate=1e-3,-1", *TINY,
                    f"hydra.sweep.dir={sweep}"], cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 of 2 sweep jobs did not complete" in result.stderr
    assert re.search(r"job 1 \[[^\]]*algo\.learning_rate=-1[^\]]*\] failed: ConfigError", result.stderr), result.stderr
    status = read_json(sweep / "0" / "status.json")
    assert status["status"] == "completed" and status["job"]["SUBMITIT_LOCAL_JOB_ID"]
    assert read_json(sweep / "0" / "summary.json")["distributed"] == {
        "world_size": 1, "params_identical": True, "data_distinct": True}
    failed = read_json(sweep / "1" / "status.json")
    assert failed["status"] == "failed" and failed["exception"] == "ConfigError" and failed["traceback"]
    # each point ran as its own submitit job (one folder per job id), at the same time
    assert len([p for p in (sweep / ".submitit").iterdir() if p.name != "%j"]) == 2


@pytest.mark.slow
def test_a_killed_local_job_ends_the_sweep_with_its_table_and_how_to_rerun_it(tmp_path):
    """Issue 33 item 7: a job killed by a signal was an ``UncompletedJobError`` traceback, no table, and its
    status.json said running."""
    sweep = tmp_path / "sweep"
    kill = "trainer.callbacks=[{_target_: tests.app.killing_callback.KillSeed, seed: ${seed}, kill_seed: 1}]"
    result = train(["-m", "hydra/launcher=local", *TINY, "seed=1", kill, f"hydra.sweep.dir={sweep}"], cwd=tmp_path,
                   env={"PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))})
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert "failed: JobKilledError" in result.stdout and "Report (table + curves)" in result.stdout, result.stdout
    line = next(line for line in result.stderr.splitlines() if line.startswith("  job 0 ["))
    assert "killed by a signal" in line and f"hydra.run.dir={(sweep / '0').resolve()}" in line
    assert read_json(sweep / "0" / "status.json")["status"] == "failed"


# --- d. two gloo ranks of one job under submitit_local ---------------------------------------------------
@pytest.mark.slow
def test_local_two_ranks_train_one_run_with_identical_parameters(tmp_path):
    sweep = tmp_path / "sweep"
    result = train(["-m", "hydra/launcher=local", "hydra.launcher.tasks_per_node=2", *TINY,
                    f"hydra.sweep.dir={sweep}"], cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir = sweep / "0"
    assert [p.name for p in sweep.iterdir() if p.is_dir() and not p.name.startswith(".")] == ["0"]  # 1 job, 2 ranks
    status = read_json(run_dir / "status.json")
    assert status["status"] == "completed" and status["attempt"] == 1
    summary = read_json(run_dir / "summary.json")
    assert summary["distributed"] == {"world_size": 2, "params_identical": True, "data_distinct": True}
    assert summary["env_steps"] == 2 * 8 * 16
    assert "rank 0 of 2" in (run_dir / "train.log").read_text()
    assert "rank 1 of 2" in (run_dir / "train.rank1.log").read_text()
    assert len(list((sweep / ".submitit").glob("*/*_result.pkl"))) == 2  # both ranks returned
    last = load_checkpoint_weights_only(run_dir / "checkpoints" / "last.pt")
    assert last["trainer"]["env_steps"] == summary["env_steps"]
    assert all(isinstance(t, torch.Tensor) for t in last["policy"].values())


# --- d'. torchrun, as the README documents it: two ranks, one run directory ------------------------------
@pytest.mark.slow
def test_torchrun_two_ranks_write_one_run_directory(tmp_path):
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
                str(random.randint(20000, 40000)), "-m", "embodirl.cli.train"]
    result = subprocess.run([*torchrun, *TINY], cwd=tmp_path, capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                            env={**os.environ, "WANDB_MODE": "offline"})
    assert result.returncode == 0, result.stdout + result.stderr
    (run_dir,) = (tmp_path / "outputs").glob("*/*")  # one directory, not one per rank
    summary = read_json(run_dir / "summary.json")
    assert summary["distributed"] == {"world_size": 2, "params_identical": True, "data_distinct": True}
    assert {p.name for p in run_dir.glob("train*.log")} == {"train.log", "train.rank1.log"}


# --- f. the same, preempted once, requeued by submitit, resumed -------------------------------------------
@pytest.mark.slow
def test_local_two_ranks_preempted_requeued_and_resumed(tmp_path):
    sweep, total = tmp_path / "sweep", 8192
    run_dir = sweep / "0"
    proc = start_train(["-m", "hydra/launcher=local", "hydra.launcher.tasks_per_node=2", *TINY,
                        f"trainer.total_env_steps={total}", "eval.every_env_steps=4096",
                        "trainer.checkpoint_every_env_steps=1024", f"hydra.sweep.dir={sweep}"], cwd=tmp_path)
    try:
        first_pid = preempt_after(proc, run_dir)
        out, err = proc.communicate(timeout=RUN_TIMEOUT_S)
    finally:
        kill_tree(proc)
    assert proc.returncode == 0, out + err

    status = read_json(run_dir / "status.json")
    assert status["status"] == "completed" and status["attempt"] == 2 and status["pid"] != first_pid
    submitit_logs = "".join(p.read_text() for p in (sweep / ".submitit").glob("*/*_0_log.*"))
    assert "Requeued job" in submitit_logs
    assert_resumed_not_restarted(run_dir, total, per_iteration=2 * 8 * 16)

    summary = read_json(run_dir / "summary.json")
    assert summary["status"] == "completed" and summary["env_steps"] == total
    assert summary["distributed"] == {"world_size": 2, "params_identical": True, "data_distinct": True}
    assert (run_dir / "train.rank1.log").read_text().count("rank 1 of 2") == 2  # both attempts, appended

    last = load_checkpoint_weights_only(run_dir / "checkpoints" / "last.pt")
    assert last["trainer"]["env_steps"] == total
    periodic = sorted((run_dir / "checkpoints").glob("step_*.pt"))
    steps = [load_checkpoint_weights_only(p)["trainer"]["env_steps"] for p in periodic]
    assert steps == sorted(steps) and steps[-1] == total and [int(p.stem[5:]) for p in periodic] == steps


# --- f. a plain process: SIGUSR2 -> save, exit 124, preempted; the same command resumes ------------------
@pytest.mark.slow
def test_plain_process_preempted_then_resumed_by_rerunning(tmp_path):
    run_dir, total = tmp_path / "run", 4096
    args = [*TINY, f"trainer.total_env_steps={total}", "eval.every_env_steps=2048",
            "trainer.checkpoint_every_env_steps=1024", f"hydra.run.dir={run_dir}"]
    proc = start_train(args, cwd=tmp_path)
    try:
        preempt_after(proc, run_dir)
        out, err = proc.communicate(timeout=RUN_TIMEOUT_S)
    finally:
        kill_tree(proc)
    assert proc.returncode == 124, out + err
    assert "; resume with: embodirl-train " in err and f"hydra.run.dir={run_dir}" in err  # the command that resumes
    assert read_json(run_dir / "status.json")["status"] == "preempted"
    summary = read_json(run_dir / "summary.json")
    assert summary["status"] == "preempted" and summary["stop_reason"] == "preempted"
    saved = load_checkpoint_weights_only(run_dir / "checkpoints" / "last.pt")["trainer"]["env_steps"]
    assert saved == summary["env_steps"] == env_steps_logged(run_dir)[-1] < total

    result = train(args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    status = read_json(run_dir / "status.json")
    assert status["status"] == "completed" and status["attempt"] == 2
    assert_resumed_not_restarted(run_dir, total, per_iteration=8 * 16)
    assert re.search(rf"at env_steps={saved} ", (run_dir / "train.log").read_text())
    assert load_checkpoint_weights_only(run_dir / "checkpoints" / "last.pt")["trainer"]["env_steps"] == total


# --- e. the real submitit_slurm path against fake SLURM commands: 2 nodes x 2 tasks = 4 ranks -------------
@pytest.mark.slow
def test_fake_slurm_multi_node_job_renders_sbatch_and_runs_four_ranks(tmp_path, fake_slurm_path):
    sweep = tmp_path / "sweep"
    profile = launcher_config(["hydra/launcher=slurm_multi_gpu"]).launcher
    result = train(["-m", "hydra/launcher=slurm_multi_gpu", "hydra.launcher.nodes=2",
                    "hydra.launcher.tasks_per_node=2", "hydra.launcher.gpus_per_node=0", *TINY,
                    f"hydra.sweep.dir={sweep}"], cwd=tmp_path, env=fake_slurm_path)
    assert result.returncode == 0, result.stdout + result.stderr

    state = Path(fake_slurm_path["FAKE_SLURM_DIR"])
    (script_path,) = state.glob("*.sh")  # one sweep point = one job (no array)
    job_id, script = script_path.stem, script_path.read_text()
    assert script == (sweep / ".submitit" / job_id / f"{job_id}_submission.sh").read_text()
    flags = sbatch_flags(script)
    folder = f"{sweep}/.submitit/%j"
    assert "array" not in flags  # one sweep point = one job
    assert flags.items() >= {
        "cpus-per-task": str(profile.cpus_per_task), "error": f"{folder}/%j_0_log.err",
        "gpus-per-node": "0", "job-name": "train", "mem": f"{profile.mem_gb}GB", "nodes": "2",
        "ntasks-per-node": "2", "open-mode": "append", "output": f"{folder}/%j_0_log.out",
        "signal": f"USR2@{profile.signal_delay_s}", "time": str(profile.timeout_min), "wckey": "submitit",
    }.items(), script
    assert "export SUBMITIT_EXECUTOR=slurm" in script
    srun = next(line for line in script.splitlines() if line.startswith("srun "))
    assert f"--output {folder}/%j_%t_log.out --error {folder}/%j_%t_log.err" in srun
    assert srun.endswith(f"{sys.executable} -u -m submitit.core._submit {folder}")

    # submitit returns once every rank's result is written; the batch script may still be exiting
    for _ in range(100):
        sacct = subprocess.run(["sacct", "-o", "JobID,State,NodeList", "--parsable2", "-j", job_id],
                               capture_output=True, text=True, check=True)
        if f"{job_id}|RUNNING|127.0.0.[1-2]" not in sacct.stdout.splitlines():
            break
        time.sleep(0.1)
    assert f"{job_id}|COMPLETED|127.0.0.[1-2]" in sacct.stdout.splitlines(), sacct.stdout

    run_dir = sweep / "0"
    status = read_json(run_dir / "status.json")
    assert status["status"] == "completed" and status["job"]["SLURM_JOB_ID"] == job_id
    summary = read_json(run_dir / "summary.json")
    assert summary["distributed"] == {"world_size": 4, "params_identical": True, "data_distinct": True}
    assert summary["env_steps"] == 4 * 8 * 16  # one iteration of 4 ranks x 8 envs x 16 steps reaches 256
    assert all((run_dir / f"train.rank{r}.log").is_file() for r in (1, 2, 3))
    assert len(list((sweep / ".submitit" / job_id).glob(f"{job_id}_*_result.pkl"))) == 4
    last = load_checkpoint_weights_only(run_dir / "checkpoints" / "last.pt")
    assert last["trainer"]["env_steps"] == summary["env_steps"]


@pytest.mark.slow
def test_fake_slurm_sweep_is_one_job_array(tmp_path, fake_slurm_path):
    """Several points under the one-GPU ``slurm`` profile: one sbatch array, one task per point."""
    sweep = tmp_path / "sweep"
    profile = launcher_config(["hydra/launcher=slurm"]).launcher
    result = train(["-m", "hydra/launcher=slurm", "hydra.launcher.gpus_per_node=null", "seed=0,1", *TINY,
                    f"hydra.sweep.dir={sweep}"], cwd=tmp_path, env=fake_slurm_path)
    assert result.returncode == 0, result.stdout + result.stderr

    (script_path,) = Path(fake_slurm_path["FAKE_SLURM_DIR"]).glob("*.sh")
    array_id, flags = script_path.stem, sbatch_flags(script_path.read_text())
    assert flags["array"] == f"0-1%{min(2, profile.array_parallelism)}"
    assert flags["output"] == f"{sweep}/.submitit/%A_%a/%A_%a_0_log.out" and flags["ntasks-per-node"] == "1"
    assert "gpus-per-node" not in flags
    for task in ("0", "1"):
        status = read_json(sweep / task / "status.json")
        assert status["status"] == "completed"
        assert status["job"]["SLURM_ARRAY_JOB_ID"] == array_id and status["job"]["SLURM_ARRAY_TASK_ID"] == task
        assert (sweep / ".submitit" / f"{array_id}_{task}" / f"{array_id}_{task}_0_result.pkl").is_file()
        assert f"seed={task}" in (sweep / task / ".hydra" / "overrides.yaml").read_text()
