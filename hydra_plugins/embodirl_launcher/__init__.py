"""The launchers of ``hydra/launcher=local`` and the SLURM profiles: submitit's, whose jobs that end without a
result (killed, cancelled, out of time after their requeues) are failed sweep jobs, not a traceback.

Hydra instantiates launchers only from the ``hydra_plugins`` namespace, and imports every module in it when it
starts: this one stays small, and the work is in :mod:`embodirl.app.launcher` (imported when a sweep launches).
Hydra finds it by walking ``hydra_plugins``, which misses an editable install: ``embodirl-train -m`` registers
the classes itself (:func:`embodirl.cli.multirun.check_multirun`).
"""

from collections.abc import Sequence

from hydra.core.utils import JobReturn
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import LocalLauncher as _SubmititLocalLauncher
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher as _SubmititSlurmLauncher


class LocalLauncher(_SubmititLocalLauncher):
    """The plugin's ``LocalLauncher``, but every job is waited for and a killed one is a failed job of the sweep."""

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from embodirl.app.launcher import launch_jobs

        return launch_jobs(self, job_overrides, initial_job_idx)


class SlurmLauncher(_SubmititSlurmLauncher):
    """The plugin's ``SlurmLauncher``, but a job that SLURM ended without a result (``scancel``, its time limit
    past the requeues, a node failure) is a failed job of the sweep, and the others are still waited for."""

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from embodirl.app.launcher import launch_jobs

        return launch_jobs(self, job_overrides, initial_job_idx)
