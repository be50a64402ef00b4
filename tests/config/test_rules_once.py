"""Every rule of a key lives once, in its schema: the build refuses only what needs torch or the built objects
(issue 37: the build re-checked the top-level keys, the seed's range, the solved criterion and the policy's
start by hand)."""

from __future__ import annotations

import re
from pathlib import Path

import embodirl

PACKAGE = Path(embodirl.__file__).parent
# A key the build names in an error: ConfigError("key", ...) or check(condition, "key", ...).
REFUSED = re.compile(r"(?:ConfigError\(\s*|\bcheck\((?:[^,()]|\([^()]*\))+,\s*)f?\"([a-z_][\w.{}]*)\"", re.S)

# What only the build can know: the devices present, memory, the built env (its frames, its copies), what the
# algorithm logs.
RUNTIME_KEYS = {"device", "env.num_envs", "eval.num_envs", "eval.video", "eval.video_num_envs", "objective"}


def refused_keys(path: Path) -> set[str]:
    return {key for key in REFUSED.findall(path.read_text(encoding="utf-8")) if "{" not in key}


def test_the_build_refuses_only_what_needs_torch_or_the_built_objects():
    found = refused_keys(PACKAGE / "app" / "build.py") | refused_keys(PACKAGE / "app" / "run.py")
    assert found - RUNTIME_KEYS == set(), "a schema's rule written again in the build"


def test_the_seed_range_is_declared_once():
    declared = [path.relative_to(PACKAGE).as_posix() for path in PACKAGE.rglob("*.py")
                if re.search(r"^MAX_SEED\s*=", path.read_text(encoding="utf-8"), re.M)]
    assert declared == ["config/run.py"]


def test_the_build_neither_parses_nor_converts_a_key():
    for name in ("build.py", "run.py"):
        text = (PACKAGE / "app" / name).read_text(encoding="utf-8")
        assert not re.search(r"\b(conform|parse|parse_node)\(", text), name
