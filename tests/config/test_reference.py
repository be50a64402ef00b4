"""The configuration reference page is generated from the schemas and kept current."""

from __future__ import annotations

from pathlib import Path

from embodirl.config.reference import documented_keys, reference_markdown

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "configuration.md"


def test_the_committed_reference_page_is_what_the_schemas_say():
    assert PAGE.read_text(encoding="utf-8") == reference_markdown(), (
        "regenerate it: python -m embodirl.config.reference docs/reference/configuration.md")


def test_documented_keys_follow_nested_nodes():
    config = {"seed": 0, "algo": {"_target_": "x.Y", "optimizer": {"_target_": "torch.optim.SGD", "momentum": 0.9}}}
    docs = documented_keys(config)
    assert docs["seed"].type == "an int"
    assert docs["algo.optimizer.momentum"].bounds == ">= 0" and docs["algo.optimizer.nesterov"].type == "true or false"


def test_no_key_of_the_reference_page_is_set_in_italics():
    # "_target_" outside a code span renders as an italic "target" (it did in 17 cells).
    import re

    prose = re.sub(r"`[^`]*`", "", reference_markdown())
    assert "_target_" in reference_markdown()
    assert re.findall(r"(?<![\w\\])_\w+_(?!\w)", prose) == []
