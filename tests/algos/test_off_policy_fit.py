"""SAC and FastTD3 with the rest of embodirl: evaluation (the deterministic actor), export, ``policy.init_from``,
randomization, curricula and wrappers, sweeps and reports, and two gloo ranks (identical networks after updates,
each rank its own replay buffer, saved to and refilled from its own file)."""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
from omegaconf import OmegaConf
from tensordict import TensorDict

from tests.conftest import compose_config, in_process_run
from tests.policies.test_export import RUNNERS

# Evaluations of 2 episodes: push_cube's episodes are long, and a run's best.pt needs an evaluation, not 20 episodes.
SAC = ["device=cpu", "algo=sac", "env=push_cube", "env.num_envs=8", "algo.num_steps=4", "algo.minibatch_size=16",
       "algo.learning_starts=64", "algo.critic_hidden_sizes=[16]", "policy.hidden_sizes=[16]", "eval.num_envs=2",
       "eval.num_episodes=2", "eval.every_env_steps=128", "trainer.checkpoint_every_env_steps=64",
       "logger.console=none", "logger.tensorboard=false"]
FASTTD3 = [*SAC[:1], "algo=fasttd3", *SAC[2:]]
ALGOS = {"sac": (SAC, "TanhGaussian"), "fasttd3": (FASTTD3, "DeterministicTanh")}  # overrides, the actor's dist


def digest(tensors) -> str:
    h = hashlib.sha1()
    for t in tensors:
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def train_in_process(run_dir: Path, overrides: list[str]) -> list[dict]:
    """``embodirl-train`` in this process; the records of ``metrics.jsonl``."""
    from embodirl.cli import train

    with pytest.MonkeyPatch.context() as patch, in_process_run(timeout_s=300):
        patch.setattr(sys, "argv", ["embodirl-train", *overrides, f"hydra.run.dir={run_dir}"])
        try:
            train.main()
        except SystemExit as exc:
            assert exc.code in (0, None), exc.code
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]



@pytest.fixture(scope="module", params=["sac", pytest.param("fasttd3", marks=pytest.mark.slow)])
def trained(request, tmp_path_factory) -> tuple[str, Path]:
    """A tiny SAC (FastTD3) run on push_cube with best.pt and last.pt, trained once for the module: its algo and
    run directory."""
    path = tmp_path_factory.mktemp(request.param) / "run"
    train_in_process(path, [*ALGOS[request.param][0], "trainer.total_env_steps=128", "eval.every_env_steps=64"])
    assert (path / "checkpoints" / "best.pt").is_file() and (path / "checkpoints" / "last.pt").is_file()
    return request.param, path


def trained_actor(algo: str, run: Path, checkpoint: str):
    """The run's torch policy as the checkpoint holds it, and its :class:`DeterministicActor` (input names)."""
    from embodirl.app.build import build_env, build_policy
    from embodirl.policies.export import DeterministicActor

    cfg = compose_config(ALGOS[algo][0])
    env = build_env(cfg.env, torch.device("cpu"), 0, num_envs=1)
    policy = build_policy(cfg.policy, env, torch.device("cpu"))
    policy.load_state_dict(torch.load(run / "checkpoints" / checkpoint, weights_only=True)["policy"])
    policy.eval()
    return policy, DeterministicActor(policy, env.observation_space, env.action_space)


def test_eval_of_a_run_takes_the_deterministic_actor_of_best_pt(trained, cli, monkeypatch):
    from embodirl.policies import distributions

    algo, run = trained

    def refuse(self, params):
        raise AssertionError("the evaluation sampled an action: it must take the deterministic one")

    monkeypatch.setattr(getattr(distributions, ALGOS[algo][1]), "sample", refuse)
    results = []
    for _ in range(2):
        result = cli("embodirl-eval", [f"run={run}", "checkpoint=best", "num_episodes=2", "device=cpu"])
        assert result.code == 0, result.err
        results.append(json.loads(sorted((run / "eval").glob("*/eval.json"))[-1].read_text()))
    assert results[0]["eval/return_mean"] == results[1]["eval/return_mean"]  # deterministic: the same episodes
    assert math.isfinite(results[0]["eval/return_mean"])


@pytest.mark.parametrize("runner", [RUNNERS["torchscript"],  # ONNX: its exporter takes seconds
                                    pytest.param(*RUNNERS["onnx"].values, marks=[*RUNNERS["onnx"].marks,
                                                                                 pytest.mark.slow], id="onnx")])
def test_the_export_of_a_run_acts_as_its_deterministic_torch_actor(trained, runner, monkeypatch, capsys, tmp_path):
    from embodirl.cli import export as export_cli

    algo, trained_run = trained
    _, run, name = runner
    fmt = "onnx" if name.endswith(".onnx") else "torchscript"
    monkeypatch.setattr(sys, "argv", ["embodirl-export", f"run={trained_run}", "checkpoint=best", f"format={fmt}",
                                      f"out={tmp_path}"])
    with in_process_run(timeout_s=300):
        export_cli.main()
    assert "(obs.state [17] float32) -> (action [2] float32)" in capsys.readouterr().out
    policy, actor = trained_actor(algo, trained_run, "best.pt")
    obs = torch.randn(512, 17) * 3
    with torch.no_grad():
        expected, _ = policy.mode(TensorDict({"state": obs}, [512]), policy.initial_state(512))
    (got,) = run(tmp_path / name, actor, [obs])
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert expected.abs().max() <= 1.0 and expected.std() > 0  # inside the bounds, and not one constant action


def test_init_from_a_run_of_the_same_algorithm_loads_its_actor(trained):
    from embodirl.app.build import build_components

    algo, run = trained
    parts = build_components(compose_config([*ALGOS[algo][0], f"policy.init_from={run / 'checkpoints' / 'last.pt'}"]))
    saved = torch.load(run / "checkpoints" / "last.pt", weights_only=True)["policy"]
    assert set(saved) == set(parts.policy.state_dict())
    assert all(torch.equal(t, saved[k]) for k, t in parts.policy.state_dict().items())


def test_init_from_a_ppo_actor_critic_into_sac_is_refused_in_one_line_naming_the_distribution(cli, tmp_path):
    from embodirl.app.build import build_env, build_policy
    from embodirl.runtime.checkpoint import FORMAT

    # a PPO actor-critic of the same layers: its Gaussian actor has another output size than SAC's TanhGaussian
    cfg = compose_config(["device=cpu", "env=push_cube", "policy.hidden_sizes=[16]"])
    ppo = build_policy(cfg.policy, build_env(cfg.env, torch.device("cpu"), 0, num_envs=1), torch.device("cpu"))
    path = tmp_path / "ppo.pt"
    torch.save({"format": FORMAT, "policy": ppo.state_dict(), "config": {"policy": OmegaConf.to_container(cfg.policy)}},
               path)
    result = cli("embodirl-train", [*SAC, f"policy.init_from={path}", f"hydra.run.dir={tmp_path / 'run'}"])
    assert result.code == 2 and len(result.err.strip().splitlines()) == 1, result.err
    assert result.err.strip() == (
        f"embodirl-train: error: policy.init_from={str(path)!r} does not fit this policy's actor: actor.2.bias is "
        "[2] in the file and [4] here. Fix: the file's actor was trained for another action distribution (its "
        "policy default; this policy's is TanhGaussian): start from a checkpoint of a run with this run's algo and "
        "policy, or drop policy.init_from")


RANDOMIZED = ["++env.randomize={table_friction:{range:[0.5,2.0]},goal_offset:{range:[1.0,1.0]}}",
              "++trainer.curriculum={goal_distance:{param:goal_offset,levels:[[1.0,1.0],[0.75,1.5]],every_env_steps:64}}",
              "env.obs_noise=0.01", "env.action_noise=0.05", "env.action_repeat=2", "env.action_delay=1"]


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["sac", "fasttd3"])
def test_randomization_curricula_and_wrappers_train_with_off_policy_algorithms(algo, tmp_path):
    from embodirl.app.build import build_components

    overrides = [*ALGOS[algo][0], *RANDOMIZED, "algo.learning_starts=32", "trainer.total_env_steps=128"]
    env, wrappers = build_components(compose_config(overrides)).env, set()
    while hasattr(env, "env"):  # the wrappers around the env, outermost first
        wrappers.add(type(env).__name__)
        env = env.env
    assert {"ObservationNoise", "ActionDelay", "ActionNoise", "ActionRepeat"} <= wrappers, wrappers
    records = train_in_process(tmp_path / "run", overrides)
    assert [r["curriculum/goal_distance"] for r in records] == [0, 1, 1, 1]  # one level up at 64 env steps
    assert all(math.isfinite(r["loss/critic"]) for r in records[1:])
    assert records[-1]["diag/buffer_size"] == 128 and records[-1]["diag/num_updates"] > 0


@pytest.mark.slow
def test_a_sac_sweep_runs_through_the_local_launcher_and_reports(tmp_path):
    sweep = tmp_path / "sweep"
    result = subprocess.run([sys.executable, "-m", "embodirl.cli.train", "-m", "hydra/launcher=local", *SAC,
                             "algo.learning_starts=32", "trainer.total_env_steps=128", "eval.every_env_steps=64",
                             "algo.learning_rate=1e-3,3e-4", f"hydra.sweep.dir={sweep}"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=300, env={**os.environ, "WANDB_MODE": "offline"})
    assert result.returncode == 0, result.stdout + result.stderr
    for job in ("0", "1"):
        summary = json.loads((sweep / job / "summary.json").read_text())
        assert summary["status"] == "completed" and summary["env_steps"] == 128
        assert summary["distributed"]["params_identical"]
    report = subprocess.run([sys.executable, "-m", "embodirl.cli.report", str(sweep), "--metric", "loss/critic"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stderr
    text = (sweep / "report" / "report.md").read_text()
    assert "| 0.001 | 1/1 | 1 completed |" in text and "| 0.0003 | 1/1 | 1 completed |" in text
    assert (sweep / "report" / "curves_loss_critic.png").stat().st_size > 0


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
    """Rank ``rank`` of 2: train to 192 env steps in ``out/uninterrupted``; in ``run_dir`` train to 128 env steps,
    resume to 192 (each rank first keeps a copy of its replay file), then resume to 256 after rank 1's replay file
    was damaged and its state file removed; its log lines go to ``out/rank<r>.log``."""
    from embodirl.app.run import run_training

    handler = logging.FileHandler(out / f"rank{rank}.log")
    logging.getLogger().addHandler(handler)
    logging.getLogger().setLevel(logging.INFO)
    own = run_dir / "checkpoints" / ("replay.pt" if rank == 0 else "replay.rank1.pt")
    _join(rank, port + 3)
    run_training(compose_config([*SAC, "trainer.total_env_steps=192"]), out / "uninterrupted")
    for i, total in enumerate((128, 192, 256)):
        _join(rank, port + i)
        if total == 192:
            (out / f"{own.name}.128").write_bytes(own.read_bytes())
        if total == 256 and rank == 1:
            own.write_bytes(b"not a torch file")
            (run_dir / "checkpoints" / "rank1.pt").unlink()
        summary = run_training(compose_config([*SAC, f"trainer.total_env_steps={total}"]), run_dir)
        handler.flush()
        if rank == 0:
            (out / f"summary{total}.json").write_text(json.dumps(summary["distributed"]))


def _spawn(fn, *args) -> None:
    port = random.randint(20000, 40000)
    mp.start_processes(fn, args=(port, *args), nprocs=2, join=True, start_method="spawn")


@pytest.mark.slow
def test_two_fasttd3_ranks_hold_identical_networks_after_updates_and_their_own_buffers(tmp_path):
    _spawn(_updates, "fasttd3", tmp_path)  # SAC's: the two-rank run below (its summary.json's check)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1)]
    assert ranks[0]["buffer"] != ranks[1]["buffer"]  # each rank stored its own envs' transitions
    for key in ranks[0]:
        if key != "buffer":
            assert ranks[0][key] == ranks[1][key], f"{key} differs between the ranks after the updates"


@pytest.mark.slow
def test_each_rank_restores_its_own_buffer_and_envs_so_a_resume_equals_the_uninterrupted_run(tmp_path):
    run_dir = tmp_path / "run"
    _spawn(_train, run_dir, tmp_path)
    logs = [(tmp_path / f"rank{r}.log").read_text() for r in (0, 1)]
    saved = [torch.load(tmp_path / f"{name}.128", weights_only=True) for name in ("replay.pt", "replay.rank1.pt")]
    # each rank wrote its own file at every last.pt: 2 ranks x 8 envs x 4 steps per iteration, 64 env steps each
    assert [s["env_steps"] for s in saved] == [128, 128] and [s["buffer"]["size"] for s in saved] == [8, 8]
    assert not torch.equal(saved[0]["buffer"]["storage"]["obs/state"], saved[1]["buffer"]["storage"]["obs/state"])
    for rank, name in enumerate(("replay.pt", "replay.rank1.pt")):  # the first resume refills both buffers
        assert f"refilled the replay buffer with 64 transitions from {run_dir / 'checkpoints' / name}" in logs[rank]
    # the second: rank 0 refills its buffer, rank 1 says in one line that its own starts empty
    assert f"refilled the replay buffer with 96 transitions from {run_dir / 'checkpoints' / 'replay.pt'}" in logs[0]
    lost = [line for line in logs[1].splitlines() if "EMPTY replay buffer" in line]
    assert len(lost) == 1 and lost[0].startswith(f"SAC resumes at env_steps=192 with an EMPTY replay buffer "
                                                 f"({run_dir / 'checkpoints' / 'replay.rank1.pt'} is unreadable: ")
    assert "EMPTY" not in logs[0]
    assert (f"rank 1 resumes at env_steps=192 with fresh episodes and its random numbers from its seed (no "
            f"{run_dir / 'checkpoints' / 'rank1.pt'})") in logs[1]
    # the first resume restored every rank's buffer, envs and random numbers: it continued as the uninterrupted run
    full, resumed = (json.loads(d.joinpath("metrics.jsonl").read_text().splitlines()[2])
                     for d in (tmp_path / "uninterrupted", run_dir))
    assert full["env_steps"] == resumed["env_steps"] == 192
    terms = [k for k in full if k.startswith(("loss/", "diag/", "episode/"))]
    assert "loss/critic" in terms and {k: full[k] for k in terms} == {k: resumed[k] for k in terms}
    last = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)
    assert last["trainer"]["env_steps"] == 256
    # the ranks' check after training covers the critics and targets as well as the policy (a resume loads rank
    # 0's into every rank: the first run is the one that tells)
    for total in (128, 192, 256):
        distributed = json.loads((tmp_path / f"summary{total}.json").read_text())
        assert distributed == {"world_size": 2, "params_identical": True, "data_distinct": True}, total
