"""TensorBoard compares a sweep (issue 32 item 6): hyperparameters in the HParams plugin's data, the config as text,
sweep runs named by their varying overrides, videos as animated GIFs without moviepy. Read back from the real event
files with TensorBoard's own readers."""

from __future__ import annotations

import io

import numpy as np
import yaml
from PIL import Image
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from embodirl.app.run import run_training
from embodirl.training.hparams import RunOverrides, hparams, read_overrides, tb_run_name
from embodirl.training.loggers import TensorBoardLogger
from tests.conftest import compose_config


def _hydra_files(overrides: list[str], multirun: bool, params: dict | None = None) -> dict[str, str]:
    """What the CLI writes into a run's .hydra/ (the parts read here)."""
    hydra = {"hydra": {"mode": "MULTIRUN" if multirun else "RUN", "sweeper": {"params": params}}}
    return {"overrides.yaml": yaml.safe_dump(overrides), "hydra.yaml": yaml.safe_dump(hydra)}


def _fake_sweep(tmp_path, command: list[str], jobs: list[list[str]], params: dict | None = None):
    (tmp_path / "multirun.yaml").write_text(yaml.safe_dump({"hydra": {"overrides": {"task": command}}}))
    for num, overrides in enumerate(jobs):
        (tmp_path / str(num) / ".hydra").mkdir(parents=True)
        for name, text in _hydra_files(overrides, True, params).items():
            (tmp_path / str(num) / ".hydra" / name).write_text(text)


def test_varying_overrides_come_from_the_command_line_sweep_and_the_sweepers_params(tmp_path):
    _fake_sweep(tmp_path, ["seed=0,1", "+sweep=lr_grid", "trainer=debug"],
                [["seed=0", "+sweep=lr_grid", "trainer=debug", "algo.learning_rate=0.001"]],
                params={"algo.learning_rate": "1e-3,2e-3"})
    overrides = read_overrides(tmp_path / "0")
    assert overrides.varying == ["seed=0", "algo.learning_rate=0.001"]
    assert tb_run_name(overrides) == "seed=0,algo.learning_rate=0.001"
    assert read_overrides(tmp_path / "missing").varying is None  # a run outside the CLI: no .hydra
    assert tb_run_name(RunOverrides(["algo=grpo"])) is None  # outside a sweep the run keeps <run_dir>/tb
    assert tb_run_name(RunOverrides([], ["env.id=mylab/Reach-v0", "algo/optimizer=sgd"])) == \
        "env.id=mylab.Reach-v0,algo.optimizer=sgd"  # one folder
    long = tb_run_name(RunOverrides([], [f"+x{i}=" + "v" * 40 for i in range(8)]))
    assert long is not None and len(long.encode()) <= 200


def test_hparams_are_headline_values_and_the_overrides_resolved():
    config = {"algo": {"_target_": "embodirl.algos.ppo.PPO", "learning_rate": 0.001, "num_steps": 32},
              "env": {"_target_": "embodirl.envs.cartpole.CartPole", "num_envs": 256}, "seed": 3}
    assert hparams(config, RunOverrides(["algo.learning_rate=1e-3", "+experiment=x", "hydra.verbose=true"])) == {
        "algo": "PPO", "env": "CartPole", "seed": 3.0, "algo.learning_rate": 0.001, "algo.num_steps": 32.0,
        "env.num_envs": 256.0, "experiment": "x"}


def _experiment(logdir):
    """The HParams plugin's experiment for ``logdir``, as TensorBoard's backend computes it."""
    from tensorboard import context
    from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
    from tensorboard.plugins import base_plugin
    from tensorboard.plugins.hparams import backend_context

    multiplexer = plugin_event_multiplexer.EventMultiplexer()
    multiplexer.AddRunsFromDirectory(str(logdir))
    multiplexer.Reload()
    provider = data_provider.MultiplexerDataProvider(multiplexer, str(logdir))
    backend = backend_context.Context(base_plugin.TBContext(data_provider=provider, logdir=str(logdir)))
    ctx = context.RequestContext()
    experiment = backend.experiment_from_metadata(ctx, "", True, backend.hparams_metadata(ctx, ""),
                                                  backend.hparams_from_data_provider(ctx, "", 100))
    return experiment, sorted(multiplexer.Runs())


def test_a_sweep_reads_as_one_hparams_experiment_with_runs_named_by_their_overrides(tmp_path, tiny):
    jobs = [["algo.learning_rate=0.001", "trainer=debug"], ["algo.learning_rate=0.003", "trainer=debug"]]
    _fake_sweep(tmp_path, ["algo.learning_rate=0.001,0.003", "trainer=debug"], [])
    for num, overrides in enumerate(jobs):
        cfg = compose_config([*tiny, overrides[0], "trainer.total_env_steps=128"])
        run_training(cfg, tmp_path / str(num), _hydra_files(overrides, multirun=True))
    experiment, runs = _experiment(tmp_path)
    assert runs == ["0/tb/algo.learning_rate=0.001", "1/tb/algo.learning_rate=0.003"]
    infos = {info.name: info for info in experiment.hparam_infos}
    assert infos["algo.learning_rate"].differs and infos["algo.learning_rate"].domain_interval.max_value == 0.003
    assert not infos["seed"].differs and "trainer" not in infos  # only what varies across the sweep
    assert {"eval/return_mean", "loss/policy"} <= {info.name.tag for info in experiment.metric_infos}
    acc = EventAccumulator(str(tmp_path / "0" / "tb" / runs[0].split("/tb/")[1]))
    acc.Reload()
    config = acc.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "learning_rate: 0.001" in config and config.startswith("    policy:")  # a markdown code block


def test_videos_are_animated_gifs_without_moviepy(tmp_path):
    frames = np.zeros((6, 16, 24, 3), np.uint8)
    frames[:, :, :, 0] = np.arange(6, dtype=np.uint8)[:, None, None] * 40  # each frame a different red
    tb = TensorBoardLogger(tmp_path / "tb")
    tb.log_video("eval/video", frames, tmp_path / "eval.mp4", 128, fps=10)
    tb.close()
    acc = EventAccumulator(str(tmp_path / "tb"), size_guidance={"images": 0})
    acc.Reload()
    image = acc.Images("eval/video")[0]
    assert (image.step, image.width, image.height) == (128, 24, 16)
    gif = Image.open(io.BytesIO(image.encoded_image_string))
    assert gif.format == "GIF" and gif.n_frames == 6 and gif.info["duration"] == 100
    gif.seek(5)
    assert np.asarray(gif.convert("RGB"))[0, 0, 0] == 200
