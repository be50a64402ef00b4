"""The schema engine: keys checked for type, bounds and spelling, nested schemas and nodes, documentation rows."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from typing import ClassVar, Literal

import pytest

from embodirl.config.schema import Bounds, Node, Schema, describe_type, key, key_docs, parse, schema_for
from embodirl.errors import ConfigError


@dataclass(frozen=True, kw_only=True)
class Inner(Schema):
    width: int = key(4, ge=1, doc="a width")


@dataclass(frozen=True, kw_only=True)
class Outer(Schema):
    renamed: ClassVar[dict[str, str]] = {"n_epochs": "num_epochs"}
    refused: ClassVar[dict[str, tuple[str, str]]] = {"lr": ("no value here", "set learning_rate instead")}
    num_epochs: int = key(2, ge=1, doc="passes")
    rate: float = key(0.5, ge=0, le=1, doc="a fraction")
    limit: float | None = key(None, gt=0, finite=False, doc="null or a limit (inf allowed)")
    mode: Literal["a", "b"] = key("a", doc="a mode")
    sizes: list[int] = key(factory=lambda: [64, 64], ge=1, doc="layer sizes")
    inner: Inner = key(factory=Inner, doc="a nested part")
    opt: Node | None = key(None, doc="a component")

    def check(self) -> None:
        if self.mode == "b" and self.rate == 0:
            raise ConfigError("rate", self.rate, "> 0 with mode=b", "pass rate=0.5")


def _error(values: dict) -> str:
    with pytest.raises(ConfigError) as info:
        parse(Outer, values, "algo.")
    return str(info.value)


def test_defaults_and_conversions():
    cfg = parse(Outer, {"num_epochs": 1e1, "rate": 1, "sizes": [8.0, 16], "inner": {"width": 2}}, "algo.")
    assert cfg.num_epochs == 10 and isinstance(cfg.num_epochs, int)  # Hydra reads 1e1 as a float
    assert cfg.rate == 1
    assert cfg.sizes == [8, 16] and cfg.inner == Inner(width=2) and cfg.mode == "a" and cfg.opt is None


def test_bad_values_name_the_full_key_and_what_is_valid():
    assert _error({"num_epochs": 0}) == ("algo.num_epochs=0 is invalid: expected an int >= 1. "
                                         "Fix: pass algo.num_epochs=2 (the default) or another value of that type.")
    assert "algo.num_epochs=1.5 is invalid: expected an int >= 1" in _error({"num_epochs": 1.5})
    assert "algo.num_epochs=True is invalid" in _error({"num_epochs": True})  # a bool is never a count
    assert "algo.rate=inf is invalid: expected a float in [0, 1]" in _error({"rate": float("inf")})
    assert "algo.rate=nan is invalid" in _error({"rate": float("nan")})
    assert "algo.mode='c' is invalid: expected one of: a, b" in _error({"mode": "c"})
    assert "algo.sizes=[64, 0] is invalid: expected a list of ints >= 1" in _error({"sizes": [64, 0]})
    assert "algo.inner.width=0 is invalid" in _error({"inner": {"width": 0}})
    assert "algo.rate=0.0 is invalid: expected > 0 with mode=b" in _error({"mode": "b", "rate": 0.0})


def test_inf_passes_only_where_the_key_allows_it():
    assert parse(Outer, {"limit": float("inf")}).limit == float("inf")
    assert "limit=-inf is invalid" in _error({"limit": float("-inf")})


def test_unknown_renamed_and_refused_keys():
    text = _error({"num_epoch": 3})
    assert text.startswith("algo.num_epoch=3 is invalid: expected a key of algo (one of: num_epochs, rate,")
    assert "Fix: did you mean algo.num_epochs? correct the spelling" in text
    assert _error({"n_epochs": 3}) == ("algo.n_epochs=3 is invalid: expected no key of this name: it was renamed to "
                                       "algo.num_epochs. Fix: pass algo.num_epochs=3 instead.")
    assert _error({"lr": 0.1}) == "algo.lr=0.1 is invalid: expected no value here. Fix: set learning_rate instead."


def test_structural_keys_are_skipped():
    assert parse(Outer, {"_target_": "x.Y", "_partial_": True}).num_epochs == 2


def test_nodes_are_parsed_by_their_class_schema():
    cfg = parse(Outer, {"opt": {"_target_": "torch.optim.SGD", "_partial_": True, "momentum": 0.5}}, "algo.")
    assert cfg.opt.target == "torch.optim.SGD" and cfg.opt.cfg.momentum == 0.5
    assert "algo.opt.momentum=-1 is invalid: expected a float >= 0" in _error({"opt": {"_target_": "torch.optim.SGD",
                                                                                       "momentum": -1}})


def test_a_class_of_ones_own_declares_its_schema_by_its_constructor():
    assert schema_for("tests.config.test_schema.Owned") is Inner
    assert schema_for("tests.config.test_schema.Unannotated") is None
    assert schema_for("no.such.Module") is None


def test_a_subclass_that_only_adds_keys_declares_its_schema_by_its_cfg_annotation():
    # It inherits a constructor annotated with its base's schema, whose check would refuse the added keys.
    assert schema_for("tests.config.test_schema.OwnedSubclass") is Outer
    assert schema_for("tests.config.test_schema.InheritsOnly") is Inner


class Owned:
    def __init__(self, cfg: Inner, *, device: str = "cpu") -> None:
        self.cfg = cfg


class OwnedSubclass(Owned):
    cfg: Outer


class InheritsOnly(Owned):
    pass


class Unannotated:
    def __init__(self, width: int = 1) -> None:
        self.width = width


def test_bounds_and_types_in_words():
    assert Bounds(ge=0, le=1).describe() == "in [0, 1]"
    assert Bounds(gt=0).describe() == "> 0"
    assert Bounds(ge=1).describe() == ">= 1"
    assert Bounds(gt=1, lt=2.5).describe() == "in (1, 2.5)"
    assert describe_type(float | None) == "null or a float"
    assert describe_type(Literal["x", True]) == "one of: x, true"
    assert describe_type(tuple[float, float]) == "two floats"
    assert describe_type(tuple[int, str]) == "a list of 2 (an int, a string)"


def test_key_docs_expand_nested_schemas():
    rows = {row.path: row for row in key_docs(Outer, "algo.")}
    assert rows["algo.num_epochs"].type == "an int" and rows["algo.num_epochs"].bounds == ">= 1"
    assert rows["algo.num_epochs"].default == 2 and rows["algo.num_epochs"].doc == "passes"
    assert rows["algo.inner.width"].doc == "a width"
    assert rows["algo.sizes"].default == [64, 64]


def test_the_shipped_schemas_import_without_torch():
    code = ("import sys, embodirl.config.components, embodirl.config.schema as s; "
            "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if m.startswith('torch')); "
            "print(len([c for c in s.schemas() if c.target]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert int(out.stdout) >= 3  # the optimizers at least
