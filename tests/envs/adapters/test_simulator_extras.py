"""Selecting a simulator whose extra is not installed is refused in one line that names the install command
(checked with the package hidden, so it runs whether or not the extra is installed)."""

from __future__ import annotations

import os
import sys

import pytest

from embodirl.config.envs import GenesisConfig, PlaygroundConfig
from embodirl.errors import ConfigError


def test_jax_is_told_not_to_take_the_gpu_before_it_is_imported(monkeypatch):
    from embodirl.envs.adapters.playground import PlaygroundEnv

    monkeypatch.delenv("XLA_PYTHON_CLIENT_PREALLOCATE", raising=False)
    monkeypatch.setitem(sys.modules, "jax", None)  # the import attempt comes after the variable is set
    with pytest.raises(ConfigError):
        PlaygroundEnv(PlaygroundConfig(num_envs=2, jax_cache=False))
    assert os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    monkeypatch.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "true")
    with pytest.raises(ConfigError):
        PlaygroundEnv(PlaygroundConfig(num_envs=2, jax_cache=False))
    assert os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] == "true", "a value the user exported wins"


@pytest.mark.parametrize("hidden", ["jax", "mujoco_playground"])
def test_env_playground_without_its_extra_names_the_install(monkeypatch, hidden):
    from embodirl.envs.adapters.playground import PlaygroundEnv

    monkeypatch.setitem(sys.modules, hidden, None)  # import raises ImportError, as when not installed
    fix = r"Fix: pip install \"embodirl\[playground\]\""
    with pytest.raises(ConfigError, match=rf"^env='playground' is invalid: .*{fix}"):
        PlaygroundEnv(PlaygroundConfig(num_envs=2, jax_cache=False))


def test_env_genesis_without_its_extra_names_the_install(monkeypatch):
    from embodirl.envs.adapters.genesis import GenesisEnv

    monkeypatch.setitem(sys.modules, "genesis", None)
    with pytest.raises(ConfigError, match=r"^env='genesis' is invalid: .*Fix: pip install \"embodirl\[genesis\]\""):
        GenesisEnv(GenesisConfig(num_envs=2))
