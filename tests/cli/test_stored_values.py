"""Values read back from a checkpoint's stored config get the bounds of the command line (issue 33 item 4)."""

from __future__ import annotations

import torch

from tests.conftest import TINY


def test_a_stored_action_delay_of_1e9_is_one_line_naming_it_not_a_memory_fill(cli, tmp_path):
    run = tmp_path / "run"
    assert cli("embodirl-train", [*TINY, f"hydra.run.dir={run}"]).code == 0
    last = run / "checkpoints" / "last.pt"
    state = torch.load(last, weights_only=True)
    state["config"]["env"]["action_delay"] = 10**9  # embodirl-eval filled 2.8 GB in 65 s building its history
    torch.save(state, last)
    out = cli("embodirl-eval", [f"run={run}", "checkpoint=last", "device=cpu"])
    assert out.code == 2
    line = out.err.strip()
    assert "\n" not in line and "env.action_delay=1000000000 is invalid: expected an int in [0, 100]" in line
    assert "num_envs" not in line
