"""The launchers of ``hydra/launcher=local`` and the SLURM profiles: submitit's (hydra-submitit-launcher), except
that a job that ends without a result (killed, cancelled, out of time after its requeues) is a failed job of the
sweep.

The plugin collects each job's result with ``job.results()``, which raises ``UncompletedJobError`` for a job
killed by a signal (kill -9, out of memory): the sweep then ended in that traceback, without the table of
:class:`~embodirl.app.sweep.SweepFate`, and the killed job's ``status.json`` kept saying ``running``. Here every
job is waited for; a killed one is recorded as ``failed`` (in its ``status.json`` when this sweep wrote it, and
in the sweep directory) with the command that reruns it, and returns NaN like any failed job, so the sweep ends
with its table and a non-zero exit naming it.
"""

from __future__ import annotations

import logging
import math
import os
import re
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
from omegaconf import OmegaConf, open_dict

from embodirl.app.sweep import record_job_failure
from embodirl.runtime.rundir import RunDirBusyError, RunDirLock
from embodirl.runtime.status import SWEEP_ID_ENV, read_status, write_status

__all__ = ["JobKilledError", "launch_jobs"]

log = logging.getLogger(__name__)


class JobKilledError(RuntimeError):
    """A sweep job that ended without a result: killed by a signal, out of memory, or its process failed."""


def launch_jobs(launcher: Any, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list[JobReturn]:
    """The plugin's ``launch``: one submitit job per override list; every job's result (NaN for a killed one).

    Args:
        launcher: A launcher of ``hydra_plugins.embodirl_launcher`` (set up by Hydra).
        job_overrides: Each job's overrides.
        initial_job_idx: The first job's number.
    """
    config = launcher.config
    sweep_dir = Path(str(config.hydra.sweep.dir))
    sweep_dir.mkdir(parents=True, exist_ok=True)
    if "mode" in config.hydra.sweep:
        os.chmod(sweep_dir, mode=int(str(config.hydra.sweep.mode), 8))
    log.info(f"Submitit '{launcher._EXECUTOR}' sweep output dir : {sweep_dir}")
    numbered = [(list(overrides), initial_job_idx + i) for i, overrides in enumerate(job_overrides)]
    for overrides, num in numbered:
        log.info(f"\t#{num} : {' '.join(filter_overrides(overrides))}")
    jobs = _executor(launcher).map_array(launcher, *zip(*[(o, "hydra.sweep.dir", num, f"job_id_for_{num}",
                                                          Singleton.get_state()) for o, num in numbered], strict=True))
    return [_result(launcher, job, overrides, num) for job, (overrides, num) in zip(jobs, numbered, strict=True)]


def _executor(launcher: Any) -> Any:
    """The submitit executor of the plugin's ``launch``, from the same parameters."""
    import submitit

    params, kind = dict(launcher.params), launcher._EXECUTOR
    init = {"folder": params.pop("submitit_folder")}
    if "max_num_timeout" in params:
        init[f"{kind}_max_num_timeout"] = params.pop("max_num_timeout")
    executor = submitit.AutoExecutor(cluster=kind, **init)
    base = set(OmegaConf.structured(BaseQueueConf).keys())
    executor.update_parameters(**{k if k in base else f"{kind}_{k}": v for k, v in params.items()})
    return executor


def _result(launcher: Any, job: Any, overrides: list[str], num: int) -> JobReturn:
    """The job's result; for a job that produced none, its failure recorded and NaN (as a failed job returns)."""
    from submitit.core.utils import UncompletedJobError

    try:
        return job.results()[0]
    except UncompletedJobError as exc:
        run_dir = _job_dir(launcher, overrides, num)
        rerun = shlex.join(["embodirl-train", *overrides, f"hydra.run.dir={run_dir.resolve()}"])
        log.debug("job %s: %s", num, exc)
        killed = JobKilledError(
            f"job {num} ended without a result ({_why(exc)}): killed by a signal, cancelled, out of memory or time, "
            f"or its process failed (its output: {job.paths.stderr}). Fix: rerun it (it continues from its "
            f"checkpoints/last.pt, if any) with: {rerun}")
        _mark_failed(run_dir, killed)
        record_job_failure(launcher.config.hydra.sweep.dir, num, run_dir, overrides, killed)
        return JobReturn(overrides=overrides, working_dir=str(run_dir), status=JobStatus.COMPLETED,
                         _return_value=math.nan)  # the sweeper goes on, and SweepFate prints the table


def _why(exc: Exception) -> str:
    """What submitit says of a job without a result, in a few words: SLURM's state (``CANCELLED``, ``TIMEOUT``,
    ``NODE_FAIL``) or why it was not requeued."""
    text = str(exc)
    state = re.search(r"\(state: ([A-Z_]+)", text)
    if state:
        return f"state {state.group(1)}"
    requeue = re.search(r"not requeued because: ([^\n]+)", text)
    return requeue.group(1).rstrip(".") if requeue else "no result file"


def _job_dir(launcher: Any, overrides: list[str], num: int) -> Path:
    """The job's run directory, resolved as the job resolves it (``hydra.sweep.dir``/``hydra.sweep.subdir``)."""
    config = launcher.hydra_context.config_loader.load_sweep_config(launcher.config, overrides)
    with open_dict(config.hydra.job):
        config.hydra.job.num = num
    hydra_config = HydraConfig.instance()
    saved = hydra_config.cfg
    hydra_config.set_config(config)  # the subdir may read ${hydra:job.override_dirname} and the like
    try:
        return Path(str(config.hydra.sweep.dir)) / str(config.hydra.sweep.subdir)
    finally:
        hydra_config.cfg = saved


def _mark_failed(run_dir: Path, exc: JobKilledError) -> None:
    """``failed`` in the killed job's ``status.json`` where it still says ``running`` for this sweep (an earlier
    run's record, or one in use by a live process, is left alone)."""
    status = read_status(run_dir)
    if status is None or status.get("status") != "running" or status.get("sweep_id") != os.environ.get(SWEEP_ID_ENV):
        return
    try:
        with RunDirLock(run_dir):
            write_status(run_dir, "failed", exc=exc)
    except (RunDirBusyError, OSError) as error:
        log.warning("could not mark %s failed: %s", run_dir, error)
