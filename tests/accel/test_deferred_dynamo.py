"""An eager run never imports torch._dynamo, and a later torch.compile sees what it would see without embodirl.

Each case runs in a fresh interpreter: the test process itself has long since imported dynamo.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

# One optimizer step, tensordict arithmetic and a zero_grad under torch._dynamo.explain: the graphs,
# the breaks and their reasons are what the deferral must leave exactly as torch makes them.
_EXPLAIN = textwrap.dedent("""
    import json, sys, torch
    from tensordict import TensorDict
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    def step(x):
        td = TensorDict({"x": x}, batch_size=[4])
        loss = net(td["x"] * 2).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss
    eager = [step(torch.ones(4, 3)).item() for _ in range(2)]
    before = "torch._dynamo" in sys.modules
    import torch._dynamo
    from torch._dynamo import trace_rules
    import tensordict.base, tensordict.utils
    explained = torch._dynamo.explain(step)(torch.ones(4, 3))
    print(json.dumps({
        "dynamo_before_compile": before,
        "eager": eager,
        "graphs": explained.graph_count,
        "breaks": explained.graph_break_count,
        "reasons": sorted(str(r.reason).split("\\n")[0] for r in explained.break_reasons),
        "tensordict_marked": id(tensordict.base._foreach_copy_compiled) in trace_rules._allowed_callable_ids,
        "constant_marked": getattr(tensordict.utils._lock_warn, "_dynamo_marked_constant", False),
    }))
""")


def _run(prelude: str) -> dict:
    out = subprocess.run([sys.executable, "-c", prelude + _EXPLAIN], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_importing_embodirl_patches_nothing_and_the_console_scripts_install_the_hook():
    script = ("import sys\n"
              "hooked = lambda: any(type(f).__module__ == 'embodirl.accel.deferred_dynamo' for f in sys.meta_path)\n"
              "import embodirl, embodirl.config.run, embodirl.accel.deferred_dynamo\n"
              "library = hooked()\n"
              "import embodirl.cli\n"
              "print(library, hooked(), 'torch' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True", "False"]  # a library user's import; the scripts'; before torch


@pytest.mark.slow  # two fresh interpreters import dynamo and explain a step; the fast tier keeps the import check
def test_eager_steps_leave_dynamo_unloaded_and_compile_sees_what_torch_alone_gives():
    deferred = _run("import embodirl.cli\n")
    pristine = _run("")
    assert deferred["dynamo_before_compile"] is False
    assert pristine["dynamo_before_compile"] is True  # torch alone loads it: the case being deferred
    assert deferred["eager"] == pristine["eager"]  # the eager steps without dynamo are the same steps
    for key in ("graphs", "breaks", "reasons", "tensordict_marked", "constant_marked"):
        assert deferred[key] == pristine[key], key
    assert deferred["tensordict_marked"] and deferred["constant_marked"]


# Two training runs in one fresh interpreter (one Python start and torch import for both tests): the default run,
# then push_cube with episodes cut by the time limit; after each, the compiler modules it loaded.
_TWO_RUNS = textwrap.dedent("""
    import json, sys
    from embodirl.cli.train import main
    root = sys.argv[1]
    def loaded_after(args):
        sys.argv = ["embodirl-train", *args]
        try:
            main()
        except SystemExit as stop:
            assert not stop.code, stop.code
        return sorted(m for m in ("torch._dynamo", "sympy") if m in sys.modules)
    default = loaded_after(["trainer=debug", "logger=none", f"hydra.run.dir={root}/default"])
    cut = loaded_after(["env=push_cube", "env.num_envs=64", "env.max_episode_steps=8", "algo.num_steps=16",
                        "trainer=debug", "trainer.total_env_steps=2048", "logger=none",
                        f"hydra.run.dir={root}/cut"])
    print(json.dumps({"default": default, "cut": cut}))
""")


@pytest.fixture(scope="module")
def loaded(tmp_path_factory) -> dict[str, list[str]]:
    """The compiler modules loaded after each run of ``_TWO_RUNS``."""
    root = tmp_path_factory.mktemp("runs")
    out = subprocess.run([sys.executable, "-c", _TWO_RUNS, str(root)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # a fresh process trains
def test_a_default_training_run_never_imports_dynamo(loaded):
    assert "torch._dynamo" not in loaded["default"]


@pytest.mark.slow  # the same fresh process
def test_episodes_cut_by_the_time_limit_load_no_compiler_machinery(loaded):
    """The first time-limit cut bootstraps the final observations. Indexing them with a 2-D mask made tensordict
    call ``torch.broadcast_shapes``, which imports torch's symbolic shapes (sympy): half a second spent inside
    the training loop at the first episode end, and inside the timed iterations of ``embodirl-bench``."""
    assert loaded["cut"] == []
