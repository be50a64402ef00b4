"""``hydra/launcher=local``'s launcher: submitit's local launcher whose killed jobs end as failed sweep jobs.

Hydra instantiates launchers only from the ``hydra_plugins`` namespace, and imports every module in it when it
starts: this one stays small, and the work is in :mod:`embodirl.app.launcher` (imported when a sweep launches).
"""

from collections.abc import Sequence

from hydra.core.utils import JobReturn
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import LocalLauncher as _SubmititLocalLauncher


class LocalLauncher(_SubmititLocalLauncher):
    """The plugin's ``LocalLauncher``, but every job is waited for and a killed one is a failed job of the sweep."""

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from embodirl.app.launcher import launch_jobs

        return launch_jobs(self, job_overrides, initial_job_idx)
