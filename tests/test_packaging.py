"""The wheel a user installs holds every module, config file and asset (``.ci/run`` then runs it)."""

from __future__ import annotations

import configparser
import importlib.metadata
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow  # pip builds the wheel in a subprocess
SCRIPTS = {"embodirl-train": "embodirl.cli.train:console", "embodirl-eval": "embodirl.cli.evaluate:console",
           "embodirl-bench": "embodirl.cli.bench:console", "embodirl-report": "embodirl.cli.report:console",
           "embodirl-export": "embodirl.cli.export:console"}


def _setuptools_builds_wheels() -> bool:
    """Whether this environment's setuptools meets pyproject's ``requires`` (77+: an SPDX ``license``) and builds
    wheels by itself."""
    try:
        version = importlib.metadata.version("setuptools")
    except importlib.metadata.PackageNotFoundError:
        return False
    return tuple(int(part) for part in version.split(".")[:2] if part.isdigit()) >= (77, 0)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    """The wheel built by pip from a clean copy of the sources (a stale ``build/`` would slip files in)."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    for name in ("embodirl",):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    # Offline when this environment can build it (the usual case); else pip fetches setuptools itself.
    isolation = ["--no-build-isolation"] if _setuptools_builds_wheels() else []
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", *isolation, "--quiet", str(source),
                           "-w", str(work / "dist")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    (path,) = (work / "dist").glob("embodirl-*.whl")
    with zipfile.ZipFile(path) as archive:
        yield archive


def _sources(folder: str, pattern: str) -> list[Path]:
    return sorted(p.relative_to(ROOT / folder) for p in (ROOT / folder).rglob(pattern) if "__pycache__" not in p.parts)


def test_the_wheel_holds_every_package_and_module(wheel):
    names = set(wheel.namelist())
    packages = [p.parent for p in _sources("embodirl", "__init__.py")]
    assert {Path("runtime"), Path("analysis"), Path("cli")} <= set(packages)  # the two a hand-kept list forgot
    missing = [f"embodirl/{p.as_posix()}" for p in _sources("embodirl", "*.py")
               if f"embodirl/{p.as_posix()}" not in names]
    assert not missing, f"modules missing from the wheel: {missing}"


def test_the_wheel_ships_the_config_groups_and_the_env_assets(wheel):
    names = set(wheel.namelist())
    configs = _sources("embodirl/conf", "*.yaml")
    assert len(configs) > 20 and Path("train.yaml") in configs and Path("eval.yaml") in configs
    missing = [f"embodirl/conf/{p.as_posix()}" for p in [*configs, Path("__init__.py")]
               if f"embodirl/conf/{p.as_posix()}" not in names]
    assert not missing, f"config files missing from the wheel: {missing}"
    assets = [p for p in (ROOT / "embodirl" / "envs" / "push_cube" / "assets").iterdir() if p.is_file()]
    assert assets and all(f"embodirl/envs/push_cube/assets/{p.name}" in names for p in assets)
    assert "embodirl/envs/genesis_cartpole/cartpole.xml" in names  # env=genesis's default model (pkg://)
    top = {name.split("/")[0] for name in names}
    assert top == {"embodirl", "embodirl-0.1.0.dist-info"}, top  # no stray top-level conf/ or tests/


def test_the_wheel_declares_the_console_scripts(wheel):
    entry_points = configparser.ConfigParser()
    entry_points.read_string(wheel.read("embodirl-0.1.0.dist-info/entry_points.txt").decode())
    assert dict(entry_points["console_scripts"]) == SCRIPTS
    names = set(wheel.namelist())
    for target in SCRIPTS.values():
        assert target.split(":")[0].replace(".", "/") + ".py" in names


def test_the_wheel_declares_its_license_as_an_spdx_expression(wheel):
    # A TOML table ({text = ...}) is deprecated: setuptools warns on every build that such builds stop working
    # after 2027-02-18.
    metadata = wheel.read("embodirl-0.1.0.dist-info/METADATA").decode()
    assert "License-Expression: Apache-2.0" in metadata.splitlines()
