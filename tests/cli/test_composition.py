"""A single run composes its config once, and gets the config Hydra's second composition would have given it."""

from __future__ import annotations

import sys

import hydra
import pytest
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from embodirl.cli.composition import composed_once, parse_yaml_with_libyaml

SEEN: list[str] = []


@hydra.main(version_base="1.3", config_path="pkg://embodirl.conf", config_name="train")
def _record(cfg: DictConfig) -> None:
    """The task: what the run would be given (its config and Hydra's node, as the run writes them to .hydra/)."""
    SEEN.append(OmegaConf.to_yaml(cfg) + OmegaConf.to_yaml(HydraConfig.instance().cfg))


@pytest.fixture
def compositions(monkeypatch) -> list[str]:
    """The run modes of every composition by Hydra's configuration loader (each call of ``load_configuration``)."""
    calls: list[str] = []
    load = ConfigLoaderImpl.load_configuration

    def counted(self, *args, **kwargs):
        calls.append(str(kwargs.get("run_mode")))
        return load(self, *args, **kwargs)

    monkeypatch.setattr(ConfigLoaderImpl, "load_configuration", counted)
    return calls


def _hydra_app(monkeypatch, argv: list[str], once: bool) -> str | BaseException:
    """Run :func:`_record` on ``argv`` as ``embodirl-train`` does (composed once) or as Hydra alone does."""
    monkeypatch.setattr(sys, "argv", ["embodirl-train", *argv])
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")  # Hydra re-raises: the test sees the error itself
    SEEN.clear()
    try:
        if once:
            with composed_once(argv):
                _record()
        else:
            _record()
    except Exception as exc:
        return exc
    return SEEN[0]


@pytest.mark.parametrize("argv", [[], pytest.param(["experiment=ppo_push_cube", "seed=3"], marks=pytest.mark.slow),
                                  pytest.param(["hydra.mode=RUN", "algo=grpo"], marks=pytest.mark.slow)])
def test_a_single_run_composes_once_what_hydra_composes_twice(monkeypatch, tmp_path, compositions, argv):
    argv = [*argv, f"hydra.run.dir={tmp_path / 'run'}"]
    hydra_alone = _hydra_app(monkeypatch, argv, once=False)
    assert compositions == ["RunMode.MULTIRUN", "RunMode.RUN"]  # Hydra: the run mode, then the run
    compositions.clear()
    assert _hydra_app(monkeypatch, argv, once=True) == hydra_alone
    assert compositions == ["RunMode.RUN"]
    assert "  mode: RUN\n" in hydra_alone and ("- hydra.mode=RUN\n" in hydra_alone)


def test_a_config_that_fails_fails_alike_without_a_third_composition(monkeypatch, tmp_path, compositions):
    argv = ["algo.learning_rat=1e-3", f"hydra.run.dir={tmp_path / 'run'}"]
    hydra_alone = _hydra_app(monkeypatch, argv, once=False)
    compositions.clear()
    once = _hydra_app(monkeypatch, argv, once=True)
    assert type(once) is type(hydra_alone) and str(once) == str(hydra_alone)
    assert str(once.__cause__) == str(hydra_alone.__cause__)  # what the one-line message reads (the full key)
    assert compositions == ["RunMode.RUN"]  # Hydra's get_mode would fail on the same override: not asked
    sweep = ["seed=1,2", f"hydra.run.dir={tmp_path / 'run'}"]  # a sweep without -m: Hydra's own refusal
    assert str(_hydra_app(monkeypatch, sweep, once=True)) == str(_hydra_app(monkeypatch, sweep, once=False))


def test_embodirl_train_composes_a_refused_run_once(cli, tmp_path, compositions):
    # The value is refused after composition, before torch: one composition, where Hydra alone made two.
    result = cli("embodirl-train", ["algo.learning_rate=abc", f"hydra.run.dir={tmp_path / 'run'}"])
    assert result.code == 2 and result.err.startswith("embodirl-train: error: algo.learning_rate='abc' is invalid")
    assert compositions == ["RunMode.RUN"]


def test_an_experiment_alone_is_not_composed_again_for_the_run_name(cli, tmp_path, compositions):
    # The run stops at its corrupt checkpoint, after naming itself: one composition, where the name took a second.
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    (tmp_path / "run" / "checkpoints" / "last.pt").write_text("not a checkpoint")
    result = cli("embodirl-train", ["experiment=ppo_push_cube", f"hydra.run.dir={tmp_path / 'run'}"])
    assert result.code == 2 and "last.pt" in result.err
    assert compositions == ["RunMode.RUN"]


def test_an_unknown_key_leaves_the_config_composed_without_it(monkeypatch, tmp_path, compositions):
    argv = ["algo=grpo", "algo.learning_rat=1e-3", "seed=7", f"hydra.run.dir={tmp_path / 'run'}"]
    monkeypatch.setattr(sys, "argv", ["embodirl-train", *argv])
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")
    with pytest.raises(Exception) as raised, composed_once(argv) as composition:
        _record()
    kept = composition.without_failed(raised.value, "train")
    assert compositions == ["RunMode.RUN"] and kept is not None
    assert composition.without_failed(raised.value, "eval") is None  # another config's error: composed there
    compositions.clear()
    alone = _hydra_app(monkeypatch, [a for a in argv if "learning_rat=" not in a], once=False)  # Hydra, without it
    job = OmegaConf.to_yaml({k: v for k, v in kept.items() if k != "hydra"})
    assert job in alone and kept.hydra.runtime.choices.algo == "grpo" and kept.seed == 7


def test_embodirl_train_composes_an_unknown_key_once(cli, tmp_path, compositions):
    # Hydra composed it twice (the run, its get_mode) and the suggestion a third time, without the key.
    result = cli("embodirl-train", ["algo.learning_rat=1e-3", f"hydra.run.dir={tmp_path / 'run'}"])
    assert result.code == 2 and result.err.strip() == (
        "embodirl-train: error: algo.learning_rat=0.001 is invalid: algo=ppo has no key learning_rat (did you mean "
        "algo.learning_rate? algo.learning_rate: learning rate (the start of a linear/cosine/adaptive_kl schedule)). "
        "Fix: pass algo.learning_rate=0.001")
    assert compositions == ["RunMode.RUN"]


def test_libyaml_parses_every_option_file_as_omegaconf_does(monkeypatch):
    from pathlib import Path

    import yaml
    from omegaconf import _utils, basecontainer

    pure_python = getattr(_utils.get_yaml_loader, "pure_python", _utils.get_yaml_loader)  # OmegaConf's own
    monkeypatch.setattr(_utils, "get_yaml_loader", pure_python)
    monkeypatch.setattr(basecontainer, "get_yaml_loader", pure_python)
    files = sorted([*Path("embodirl/conf").rglob("*.yaml"), *(Path(hydra.__file__).parent / "conf").rglob("*.yaml")])
    assert len(files) > 50
    parsed = [OmegaConf.to_yaml(OmegaConf.load(file)) for file in files]
    parse_yaml_with_libyaml()
    assert issubclass(_utils.get_yaml_loader(), yaml.cyaml.CParser)  # what Hydra's composition then reads with
    assert [OmegaConf.to_yaml(OmegaConf.load(file)) for file in files] == parsed
    assert OmegaConf.create("a: 1e-3\nb: 2020-01-01\nc: .5") == {"a": 0.001, "b": "2020-01-01", "c": 0.5}
    with pytest.raises(yaml.constructor.ConstructorError, match="found duplicate key a"):
        OmegaConf.create("a: 1\na: 2\n")


def test_embodirl_train_tries_an_unknown_option_once(cli, tmp_path, compositions):
    # Hydra tried it twice: the run's composition, then its get_mode's, which fails on the same missing file.
    result = cli("embodirl-train", ["algo=nope", f"hydra.run.dir={tmp_path / 'run'}"])
    assert result.code == 2 and result.err.startswith("embodirl-train: error: algo=nope is invalid: expected one of: ")
    assert compositions == ["RunMode.RUN"]
