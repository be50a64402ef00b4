"""The documentation tells the truth: its commands run, its bench commands parse, and the site builds strictly.

The getting-started page is run top to bottom, in process, in an empty directory: every ``embodirl-*`` line of
its ``bash`` blocks either runs (a smoke version where the real one trains for long: ``trainer=debug`` and a
small budget) or, for commands that would train for long on an unrelated config, composes (``--cfg job``).
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from tests.conftest import in_process_run

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
SMOKE_BUDGET = 24_576  # three iterations of the default PPO: enough for a resume to train one more


def shell_commands(page: Path) -> list[list[str]]:
    """The command lines of the page's ``bash`` code blocks (continuations joined, comments dropped)."""
    commands, fence, lines = [], None, page.read_text().splitlines()
    pending = ""
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("```"):
            fence = None if fence is not None else stripped[3:].strip()
            continue
        if fence != "bash" or not stripped:
            continue
        pending += stripped[:-1] + " " if stripped.endswith("\\") else stripped
        if not stripped.endswith("\\"):
            commands.append(shlex.split(pending, comments=True))
            pending = ""
    return [argv for argv in commands if argv]


def embodirl_commands(page: Path) -> list[list[str]]:
    return [argv for argv in shell_commands(page) if argv[0].startswith("embodirl-")]


def run_script(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> int:
    """Run an installed console script in this process, as the shell would; return its exit status."""
    (entry,) = entry_points(group="console_scripts", name=argv[0])
    monkeypatch.setattr(sys, "argv", list(argv))
    with in_process_run(timeout_s=300):
        try:
            status = entry.load()()
        except SystemExit as exc:
            status = exc.code
    return 0 if status is None else status


def smoke_version(argv: list[str]) -> list[str]:
    """What the test runs for a documented ``embodirl-train`` line.

    ``--help`` and ``--cfg`` lines run as written. A line that names a run directory or ``trainer=debug`` runs as
    a smoke version: ``trainer=debug`` and a budget of at most :data:`SMOKE_BUDGET` env steps. Any other line
    (an example of a long run) only composes its config (``--cfg job``).
    """
    args = argv[1:]
    if any(a in ("--help", "-h", "--cfg") for a in args):
        return argv
    if not any(a.startswith("hydra.run.dir=") or a == "trainer=debug" for a in args):
        return [*argv, "--cfg", "job"]
    budget = [f"trainer.total_env_steps={min(int(float(a.split('=')[1])), SMOKE_BUDGET)}" for a in args
              if a.startswith("trainer.total_env_steps=")]
    kept = [a for a in args if not a.startswith("trainer.total_env_steps=")]
    return [argv[0], *dict.fromkeys(["trainer=debug", *kept, *budget])]


@pytest.mark.slow  # every command of the page, end to end: train, eval, report, resume
def test_the_getting_started_page_runs_top_to_bottom(tmp_path, monkeypatch, capsys):
    commands = embodirl_commands(DOCS / "getting-started.md")
    scripts = {argv[0] for argv in commands}
    assert {"embodirl-train", "embodirl-eval", "embodirl-report"} <= scripts  # the page shows each of them
    monkeypatch.chdir(tmp_path)
    for argv in commands:
        command = smoke_version(argv) if argv[0] == "embodirl-train" else argv
        status = run_script(command, monkeypatch)
        out, err = capsys.readouterr()
        assert status == 0, f"{shlex.join(argv)} (run as {shlex.join(command)}) exited {status}: {err[-2000:]}"
        if "--help" in command:
            assert "embodirl-train" in out and "algo" in out
        if "--cfg" in command:
            assert "algo:" in out and "env:" in out  # the composed config, printed as YAML
    run = tmp_path / "runs" / "first"  # the page's first run, evaluated, reported and resumed
    assert json.loads((run / "summary.json").read_text())["status"] == "completed"
    assert json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])["env_steps"] == SMOKE_BUDGET
    assert len(list(run.glob("eval/*/eval.json"))) == 1 and (run / "report" / "report.md").is_file()


def test_smoke_versions_keep_the_documented_overrides():
    assert smoke_version(["embodirl-train", "hydra.run.dir=runs/first", "trainer.total_env_steps=500000"]) == [
        "embodirl-train", "trainer=debug", "hydra.run.dir=runs/first", f"trainer.total_env_steps={SMOKE_BUDGET}"]
    assert smoke_version(["embodirl-train", "algo=grpo"]) == ["embodirl-train", "algo=grpo", "--cfg", "job"]
    assert smoke_version(["embodirl-train", "--help"]) == ["embodirl-train", "--help"]


def test_shell_commands_join_continuations_and_drop_comments(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("text\n\n```bash\nembodirl-train a=1 \\\n    b=2   # why\n\n# a comment line\n```\n\n"
                    "```text\nembodirl-train not=a-command\n```\n\n  ```bash\n  embodirl-report 'x y'\n  ```\n")
    assert shell_commands(page) == [["embodirl-train", "a=1", "b=2"], ["embodirl-report", "x y"]]


def test_every_documented_bench_command_parses(capsys):
    from embodirl.cli.bench import main

    commands = [argv for page in sorted(DOCS.rglob("*.md")) for argv in embodirl_commands(page)
                if argv[0] == "embodirl-bench"]
    assert len(commands) >= 4
    for argv in commands:
        args = argv[1:]
        split = args.index("--") if "--" in args else len(args)
        with pytest.raises(SystemExit) as parsed:  # --help ends the parse once everything before it is valid
            main([*args[:split], "--help", *args[split:]])
        out, err = capsys.readouterr()
        assert parsed.value.code == 0, f"{shlex.join(argv)}: {err.strip()}"
        assert out.startswith("usage: embodirl-bench")


def test_the_site_builds_with_warnings_as_errors(tmp_path, monkeypatch):
    pytest.importorskip("mkdocs", reason="the docs extra is not installed (pip install -e '.[docs]')")
    pytest.importorskip("mkdocstrings", reason="the docs extra is not installed (pip install -e '.[docs]')")
    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    monkeypatch.setenv("NO_MKDOCS_2_WARNING", "1")  # Material's banner about MkDocs 2 (printed, not a warning)
    monkeypatch.chdir(ROOT)
    config = load_config(str(ROOT / "mkdocs.yml"), strict=True, site_dir=str(tmp_path / "site"))
    config.plugins.on_startup(command="build", dirty=False)
    try:
        build(config)  # raises mkdocs.exceptions.Abort on any warning: a broken link, a docstring problem
    finally:
        config.plugins.on_shutdown()
    api = (tmp_path / "site" / "reference" / "api" / "index.html").read_text()
    assert re.search(r'id="embodirl\.algos\.functional\.compute_gae"', api)  # the docstrings were rendered
