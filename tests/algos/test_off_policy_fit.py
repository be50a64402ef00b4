"""SAC and FastTD3 with the rest of embodirl: evaluation (the deterministic actor), export, ``policy.init_from``,
randomization, curricula and wrappers, sweeps and reports, and two gloo ranks (identical networks after updates,
each rank its own replay buffer, saved to and refilled from its own file)."""

from __future__ import annotations

import hashlib
import logging
import os
import random
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from tests.conftest import compose_config

SAC = ["device=cpu", "algo=sac", "env=push_cube", "env.num_envs=8", "algo.num_steps=4", "algo.minibatch_size=16",
       "algo.learning_starts=64", "algo.critic_hidden_sizes=[16]", "policy.hidden_sizes=[16]", "eval.num_envs=2",
       "eval.every_env_steps=128", "trainer.checkpoint_every_env_steps=64", "logger.console=none",
       "logger.tensorboard=false"]
FASTTD3 = [*SAC[:1], "algo=fasttd3", *SAC[2:]]


def digest(tensors) -> str:
    h = hashlib.sha1()
    for t in tensors:
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


# --- two gloo ranks -----------------------------------------------------------------------------------------
def _join(rank: int, port: int) -> None:
    os.environ.update({"RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": str(port)})


def _updates(rank: int, port: int, algo: str, out: Path) -> None:
    """Build the algorithm as rank ``rank`` of 2 and take gradient steps; record what each rank holds."""
    from embodirl.app.build import build_components, rank_seed
    from embodirl.runtime.distributed import init_distributed, shutdown

    _join(rank, port)
    init_distributed(use_cuda=False)
    try:
        parts = build_components(compose_config([*(SAC if algo == "sac" else FASTTD3), "algo.learning_starts=32"]),
                                 rank=rank, world_size=2)
        parts.collector.reset(seed=rank_seed(0, rank))
        for _ in range(3):
            parts.algo.update(parts.collector.collect())
        assert parts.algo.num_updates > 0
        networks = {k: digest(m.state_dict().values()) for k, m in parts.algo.networks().items()}
        torch.save({"policy": digest(parts.policy.state_dict().values()), **networks,
                    "buffer": digest([parts.algo.buffer.storage["obs", "state"]])}, out / f"rank{rank}.pt")
    finally:
        shutdown()


def _train(rank: int, port: int, run_dir: Path, out: Path) -> None:
    """Rank ``rank`` of 2: train to 128 env steps, resume to 192 (rank 1 first keeps a copy of its replay file),
    then resume to 256 after rank 1's file was damaged; its log lines go to ``out/rank<r>.log``."""
    from embodirl.app.run import run_training

    handler = logging.FileHandler(out / f"rank{rank}.log")
    logging.getLogger().addHandler(handler)
    logging.getLogger().setLevel(logging.INFO)
    own = run_dir / "checkpoints" / ("replay.pt" if rank == 0 else "replay.rank1.pt")
    for i, total in enumerate((128, 192, 256)):
        _join(rank, port + i)
        if total == 192:
            (out / f"{own.name}.128").write_bytes(own.read_bytes())
        if total == 256 and rank == 1:
            own.write_bytes(b"not a torch file")
        run_training(compose_config([*SAC, f"trainer.total_env_steps={total}"]), run_dir)
        handler.flush()


def _spawn(fn, *args) -> None:
    port = random.randint(20000, 40000)
    mp.start_processes(fn, args=(port, *args), nprocs=2, join=True, start_method="spawn")


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["sac", "fasttd3"])
def test_two_ranks_hold_identical_networks_after_updates_and_their_own_buffers(algo, tmp_path):
    _spawn(_updates, algo, tmp_path)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1)]
    assert ranks[0]["buffer"] != ranks[1]["buffer"]  # each rank stored its own envs' transitions
    for key in ranks[0]:
        if key != "buffer":
            assert ranks[0][key] == ranks[1][key], f"{key} differs between the ranks after the updates"


@pytest.mark.slow
def test_each_rank_saves_and_refills_its_own_buffer_and_says_when_it_is_lost(tmp_path):
    run_dir = tmp_path / "run"
    _spawn(_train, run_dir, tmp_path)
    logs = [(tmp_path / f"rank{r}.log").read_text() for r in (0, 1)]
    saved = [torch.load(tmp_path / f"{name}.128", weights_only=True) for name in ("replay.pt", "replay.rank1.pt")]
    # each rank wrote its own file at every last.pt: 2 ranks x 8 envs x 4 steps per iteration, 64 envs steps each
    assert [s["env_steps"] for s in saved] == [128, 128] and [s["buffer"]["size"] for s in saved] == [8, 8]
    assert not torch.equal(saved[0]["buffer"]["storage"]["obs/state"], saved[1]["buffer"]["storage"]["obs/state"])
    for rank, name in enumerate(("replay.pt", "replay.rank1.pt")):  # the first resume refills both buffers
        assert f"refilled the replay buffer with 64 transitions from {run_dir / 'checkpoints' / name}" in logs[rank]
    # the second: rank 0 refills its buffer, rank 1 says in one line that its own starts empty
    assert f"refilled the replay buffer with 96 transitions from {run_dir / 'checkpoints' / 'replay.pt'}" in logs[0]
    lost = [line for line in logs[1].splitlines() if "EMPTY replay buffer" in line]
    assert lost == [f"SAC resumes at env_steps=192 with an EMPTY replay buffer ({run_dir / 'checkpoints'}"
                    "/replay.rank1.pt is unreadable: " + lost[0].split("is unreadable: ")[1]], logs[1]
    assert "EMPTY" not in logs[0]
    last = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)
    assert last["trainer"]["env_steps"] == 256
