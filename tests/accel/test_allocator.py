"""The training process keeps freed memory instead of faulting it in again every minibatch (glibc on Linux)."""

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt is Linux-only")

# Builds the default run's components (which configures the allocator) and counts the page faults of a few
# PPO updates after a warm-up. A fresh process: the thresholds are process-wide and cannot be unset.
_SCRIPT = textwrap.dedent("""
    import ctypes, resource, sys
    from hydra import compose, initialize_config_module
    import embodirl.accel.allocator as allocator
    if sys.argv[1] == "off":  # glibc's starting thresholds (128 KiB), held fixed instead of moving with the load
        def glibc_defaults():
            mallopt = ctypes.CDLL(None).mallopt
            mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
            return bool(mallopt(-3, 128 << 10)) and bool(mallopt(-1, 128 << 10))
        allocator.keep_freed_memory = glibc_defaults
        import embodirl.app.build
        embodirl.app.build.keep_freed_memory = allocator.keep_freed_memory
    from embodirl.app.build import build_components
    with initialize_config_module("embodirl.conf", version_base="1.3"):
        parts = build_components(compose("train", overrides=["eval.num_envs=1"]))
    parts.collector.reset(seed=0)
    faults = 0
    for i in range(8):
        rollout = parts.collector.collect()
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        parts.algo.update(rollout)
        if i >= 4:
            faults += resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    print(faults)
""")


def _update_page_faults(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", _SCRIPT, mode], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[-1])


@pytest.mark.slow
def test_ppo_updates_do_not_fault_their_memory_in_again():
    faults = _update_page_faults("on")
    assert faults < 1000, f"{faults} page faults in 4 updates of the default run"


@pytest.mark.slow
def test_without_it_the_updates_fault_every_minibatch():
    # The reason for the module: with glibc's moving thresholds the same 4 updates fault thousands of times, but
    # where those thresholds stand depends on what the process freed before (they can happen to stand high, and
    # then nothing faults). Held at glibc's starting values, every minibatch faults its activations in again.
    assert _update_page_faults("off") > 2000
