"""What a SLURM cluster offers, read from ``sinfo``, and SLURM's own answers turned into one line with a fix.

A job that asks for what no node has (GPUs on a cluster without GRES, more memory or cores than a node holds, an
unknown partition) is refused by ``sbatch`` only after the sweep has started, with a message that names no
config key. :func:`cluster_partitions` reads the partitions once (one ``sinfo`` call, under a second) so that the
launcher's request can be checked before anything is submitted; :func:`explain_sbatch_error` turns what
``sbatch`` says when it refuses anyway (an account it does not know, a QOS) into the same kind of line.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
from typing import Any

__all__ = ["Partition", "accounting_available", "cluster_partitions", "explain_sbatch_error", "gpus_of_gres",
           "squeue_watcher"]


@dataclasses.dataclass(frozen=True)
class Partition:
    """One partition as ``sinfo`` describes it (its largest node, since one job runs on nodes of one kind).

    Attributes:
        name: The partition's name, without sinfo's ``*`` for the default.
        default: Whether jobs that name no partition go here.
        cpus: The most CPUs on one node.
        memory_mb: The most memory on one node, in MB (SLURM's ``RealMemory``).
        gpus: The most GPUs on one node (0 where the nodes declare no ``gpu`` GRES).
    """

    name: str
    default: bool
    cpus: int
    memory_mb: int
    gpus: int


def gpus_of_gres(gres: str) -> int:
    """The GPU count in one node's GRES string (``gpu:a100:4(S:0-1)``, ``gpu:2,shard:8``, ``(null)``)."""
    total = 0
    for item in gres.split(","):
        match = re.match(r"gpu(?::[^:(]+)?:(\d+)", item.strip())
        if match:
            total += int(match.group(1))
    return total


def cluster_partitions(timeout_s: float = 10.0) -> list[Partition] | None:
    """The cluster's partitions, or None when ``sinfo`` cannot tell (absent, failing, too slow): then nothing is
    checked before submission and ``sbatch`` has the last word."""
    try:
        done = subprocess.run(["sinfo", "-h", "-N", "-o", "%P|%c|%m|%G"], capture_output=True, text=True,
                              timeout=timeout_s, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    largest: dict[str, Partition] = {}
    for line in done.stdout.splitlines():
        fields = line.strip().split("|")
        if len(fields) != 4:
            continue
        name, cpus, memory, gres = fields
        node = Partition(name.rstrip("*"), name.endswith("*"), _int(cpus), _int(memory), gpus_of_gres(gres))
        seen = largest.get(node.name)
        largest[node.name] = node if seen is None else dataclasses.replace(
            seen, cpus=max(seen.cpus, node.cpus), memory_mb=max(seen.memory_mb, node.memory_mb),
            gpus=max(seen.gpus, node.gpus))
    return list(largest.values()) or None


def _int(text: str) -> int:
    """sinfo's count (``64``, ``64+`` for nodes that differ, ``N/A``) as an int; 0 when it gives none."""
    match = re.match(r"\d+", text.strip())
    return int(match.group(0)) if match else 0


# sbatch's refusals that a config key can fix: (pattern, what it means, the fix).
_SBATCH_ERRORS = [
    (r"Invalid account", "SLURM does not know this account (or you are not in it)",
     "pass hydra.launcher.account=<an account of yours> (`sacctmgr show assoc user=$USER` lists them), or "
     "hydra.launcher.account=null for your default"),
    (r"Invalid qos", "SLURM does not allow this QOS for you", "pass hydra.launcher.qos=null or a QOS that "
     "`sacctmgr show assoc user=$USER format=qos` lists"),
    (r"invalid partition", "no partition of that name", "pass hydra.launcher.partition=<one that `sinfo -s` lists>"),
    (r"Invalid generic resource", "the job asks for GPUs (GRES) that no node of the partition declares",
     "pass hydra/launcher=slurm_cpu, or hydra.launcher.gpus_per_node=null"),
    (r"Requested node configuration is not available|Memory specification can not be satisfied",
     "no node has that many cores, that much memory or those GPUs",
     "lower hydra.launcher.cpus_per_task / mem_gb / gpus_per_node to what `sinfo -N -l` shows"),
    (r"time limit", "the partition's time limit is shorter than the job's", "lower hydra.launcher.timeout_min"),
]


def explain_sbatch_error(stderr: str) -> str:
    """One line for ``sbatch``'s refusal ``stderr``: what it means and a fix, or SLURM's own words if unknown."""
    said = " ".join(line.strip() for line in stderr.strip().splitlines() if line.strip())
    said = re.sub(r"^(sbatch: error: )+", "", said.replace("sbatch: error: ", "", 1)) or "no message"
    for pattern, meaning, fix in _SBATCH_ERRORS:
        if re.search(pattern, stderr, flags=re.IGNORECASE):
            return f"sbatch refused the job: {said} ({meaning}). Fix: {fix}."
    return f"sbatch refused the job: {said}. Fix: check the hydra.launcher.* settings against `sinfo -s` and your site."


def accounting_available(timeout_s: float = 10.0) -> bool:
    """Whether ``sacct`` answers. Small clusters often run without an accounting database (no slurmdbd); then
    sacct fails at every call ("Slurm accounting storage is disabled")."""
    try:
        done = subprocess.run(["sacct", "-n", "-X", "-j", "1", "--parsable2"], capture_output=True, text=True,
                              timeout=timeout_s, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def squeue_watcher(delay_s: int = 60) -> Any:
    """A submitit job watcher that reads job states from ``squeue`` instead of ``sacct``.

    submitit follows SLURM jobs through sacct; without accounting every poll fails, prints a warning, and a job
    that ends without a result (``scancel``, a node failure) stays "UNKNOWN" for ever, so the sweep waits for
    ever. squeue knows every job the controller still holds (finished ones for ``MinJobAge``, 300 s by default);
    a job it no longer lists has ended, and submitit then reads its result file or reports it uncompleted.
    """
    from submitit.slurm.slurm import SlurmInfoWatcher

    class SqueueWatcher(SlurmInfoWatcher):
        def _make_command(self) -> list[str] | None:
            if not self._registered - self._finished:
                return None
            # All of the user's jobs, not --jobs: squeue fails outright on an id it no longer holds.
            return ["squeue", "--me", "--states=all", "--array", "--noheader", "--format=%i|%T|%N"]

        def read_info(self, string: bytes | str) -> dict[str, dict[str, str]]:
            text = string.decode() if isinstance(string, bytes) else string
            info = super().read_info("JobID|State|NodeList\n" + text)
            for job in self._registered - self._finished:  # gone from the controller: ended, result or not
                info.setdefault(job, {"JobID": job, "State": "ENDED", "NodeList": ""})
            return info

    return SqueueWatcher(delay_s=delay_s)
