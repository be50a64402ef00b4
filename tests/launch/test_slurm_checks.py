"""What embodirl reads from SLURM (sinfo's partitions, GRES strings) and how it words sbatch's refusals."""

import pytest

from embodirl.cli.multirun import check_multirun
from embodirl.errors import ConfigError
from embodirl.runtime.slurm import cluster_partitions, explain_sbatch_error, gpus_of_gres

SLOW = pytest.mark.slow  # the rest of a case table: its representative stays in the fast tier


@pytest.mark.parametrize(("gres", "gpus"), [("(null)", 0), ("gpu:4", 4), ("gpu:a100:8(S:0-1)", 8),
                                            ("gpu:2,shard:8", 2), ("gpu:v100:2,gpu:t4:1", 3), ("mps:100", 0)])
def test_gpus_of_gres(gres, gpus):
    assert gpus_of_gres(gres) == gpus


def test_partitions_read_from_sinfo(fake_slurm_path):
    (debug,) = cluster_partitions()
    assert (debug.name, debug.default, debug.cpus, debug.memory_mb, debug.gpus) == ("debug", True, 64, 256000, 4)


def test_no_sinfo_means_no_check(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert cluster_partitions() is None


@pytest.mark.parametrize(("overrides", "fragments"), [
    (["hydra.launcher.gpus_per_node=8", "hydra.launcher.tasks_per_node=8"],
     ["hydra.launcher.gpus_per_node=8", "4 GPUs", "Fix: pass hydra.launcher.gpus_per_node=4."]),
    pytest.param(["hydra.launcher.cpus_per_task=32"], ["hydra.launcher.cpus_per_task=32", "4 task(s) x 32 CPUs",
                                                       "Fix: pass hydra.launcher.cpus_per_task=16."], marks=SLOW),
    pytest.param(["hydra.launcher.partition=a100"], ["hydra.launcher.partition='a100'", "one of debug",
                                                     "Fix: pass hydra.launcher.partition=debug."], marks=SLOW),
])
def test_multi_gpu_request_checked_against_the_partition(fake_slurm_path, overrides, fragments):
    with pytest.raises(ConfigError) as refused:
        check_multirun(["-m", "hydra/launcher=slurm_multi_gpu", *overrides])
    assert all(f in str(refused.value) for f in fragments), str(refused.value)
    check_multirun(["-m", "hydra/launcher=slurm_multi_gpu"])  # the profile itself fits the fake cluster


def test_a_signal_delay_that_leaves_no_time_before_slurm_s_timer_is_refused(fake_slurm_path):
    # A debug queue's timeout_min=2 with the profile's signal_delay_s=120: SLURM's 30-s timer would signal the job
    # at its start, before anything is saved, and it would requeue itself max_num_timeout times without training.
    with pytest.raises(ConfigError) as refused:
        check_multirun(["-m", "hydra/launcher=slurm_cpu", "hydra.launcher.timeout_min=2"])
    line = str(refused.value)
    assert "hydra.launcher.signal_delay_s=120" in line and "under 90 s for hydra.launcher.timeout_min=2" in line
    assert "Fix: pass hydra.launcher.signal_delay_s=30, or a larger hydra.launcher.timeout_min" in line
    check_multirun(["-m", "hydra/launcher=slurm_cpu", "hydra.launcher.timeout_min=2",
                    "hydra.launcher.signal_delay_s=30"])  # the fix passes
    check_multirun(["-m", "hydra/launcher=slurm_cpu", "hydra.launcher.timeout_min=1",
                    "hydra.launcher.signal_delay_s=10"])  # the real-SLURM time-limit test's request


@pytest.mark.parametrize(("stderr", "fragments"), [
    ("sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified",
     ["Invalid account", "Fix: pass hydra.launcher.account="]),
    ("sbatch: error: Invalid generic resource (gres) specification",
     ["Invalid generic resource", "Fix: pass hydra/launcher=slurm_cpu, or hydra.launcher.gpus_per_node=null"]),
    ("sbatch: error: Batch job submission failed: Requested node configuration is not available",
     ["node configuration", "Fix: lower hydra.launcher.cpus_per_task"]),
    ("sbatch: error: something new", ["something new", "Fix: check the hydra.launcher.* settings"]),
])
def test_sbatch_refusal_is_one_line_with_a_fix(stderr, fragments):
    line = explain_sbatch_error(stderr)
    assert "\n" not in line and line.startswith("sbatch refused the job: ")
    assert all(f in line for f in fragments), line
