"""The documentation tells the truth: its commands run, its bench commands parse, and the site builds strictly.

The getting-started page is run top to bottom, in process, in an empty directory: every ``embodirl-*`` line of
its ``bash`` blocks either runs (a smoke version where the real one trains for long: ``trainer=debug`` and a
small budget) or, for commands that would train for long on an unrelated config, composes (``--cfg job``).
"""

from __future__ import annotations

import importlib
import importlib.util
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
SMOKE_BUDGET = 24_576  # twelve iterations of the default PPO: enough for a resume to train one more
SMOKE_STEP = 2_048  # one iteration of the default PPO (64 envs x 32 steps)
SMOKE_DEFAULT = 8_192  # a line naming no budget: four iterations of the default PPO, one evaluation and checkpoint
SMOKE_EPISODES = 4  # an embodirl-eval line: enough episodes to check the command, not the policy


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
    """Run an installed console script's ``main`` in this process, as the shell would; return its exit status.

    (The script itself, ``console``, ends its process when ``main`` returns: that part is tested in
    ``tests/cli/test_process.py``.)"""
    (entry,) = entry_points(group="console_scripts", name=argv[0])
    monkeypatch.setattr(sys, "argv", list(argv))
    with in_process_run(timeout_s=300):
        try:
            status = importlib.import_module(entry.module).main()
        except SystemExit as exc:
            status = exc.code
    return 0 if status is None else status


def smoke_version(argv: list[str], run_dir: str = "runs/smoke") -> list[str]:
    """What the test runs for a documented ``embodirl-train`` line.

    ``--help`` and ``--cfg`` lines run as written. Every other line runs as a smoke version: ``trainer=debug``
    (which keeps the algorithm, policy and env of the line and beats an experiment's budget), a budget scaled to
    at most :data:`SMOKE_BUDGET` env steps (500,000 -> all of it, 20,000 -> one iteration: a run continued with
    a larger budget still trains more; a line naming none: :data:`SMOKE_DEFAULT`, which also bounds the gradient
    steps of an off-policy line), and ``run_dir`` (a sweep: ``<run_dir>-sweep``) where the line names none.
    """
    args = argv[1:]
    if any(a in ("--help", "-h", "--cfg") for a in args):
        return argv
    budget = [f"trainer.total_env_steps={_smoke_budget(int(float(a.split('=')[1])))}" for a in args
              if a.startswith("trainer.total_env_steps=")] or [f"trainer.total_env_steps={SMOKE_DEFAULT}"]
    kept = [a for a in args if not a.startswith("trainer.total_env_steps=")]
    where = ("hydra.sweep.dir=", f"{run_dir}-sweep") if "-m" in args else ("hydra.run.dir=", run_dir)
    place = [] if any(a.startswith(where[0]) for a in args) else ["".join(where)]
    # the added overrides go last, after any flag: argparse reads the overrides as one run of words
    return [argv[0], *dict.fromkeys([*kept, "trainer=debug", *budget, *place])]


def smoke_eval(argv: list[str]) -> list[str]:
    """What the test runs for a documented ``embodirl-eval`` line: :data:`SMOKE_EPISODES` episodes where the line
    names no ``num_episodes`` (a smoke-trained policy balances CartPole-v1 for hundreds of steps an episode)."""
    if any(a.startswith("num_episodes=") for a in argv[1:]):
        return argv
    return [*argv, f"num_episodes={SMOKE_EPISODES}"]


def _smoke_budget(documented: int) -> int:
    return min(documented, SMOKE_BUDGET, max(SMOKE_STEP, documented * SMOKE_BUDGET // 500_000))


def run_page(commands: list[list[str]], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """Run a page's ``embodirl-*`` commands in order, each ``embodirl-train`` and ``embodirl-eval`` line as its
    smoke version; every one must exit 0. ``--help`` prints the keys, ``--cfg`` the composed config."""
    smoke = {"embodirl-train": lambda i, argv: smoke_version(argv, f"runs/smoke{i}"),
             "embodirl-eval": lambda i, argv: smoke_eval(argv)}
    for i, argv in enumerate(commands):
        command = smoke[argv[0]](i, argv) if argv[0] in smoke else argv
        status = run_script(command, monkeypatch)
        out, err = capsys.readouterr()
        assert status == 0, f"{shlex.join(argv)} (run as {shlex.join(command)}) exited {status}: {err[-2000:]}"
        if "--help" in command:
            assert "embodirl-train" in out and "algo" in out
        if "--cfg" in command:
            assert "algo:" in out and "env:" in out  # the composed config, printed as YAML


def check_first_run(run: Path) -> None:
    """The pages' first run, evaluated and reported; their short run, stopped by its budget and continued by a
    larger one."""
    assert json.loads((run / "summary.json").read_text())["status"] == "completed"
    assert len(list(run.glob("eval/*/eval.json"))) == 1 and (run / "report" / "report.md").is_file()
    short = run.parent / "short"
    steps = [json.loads(line)["env_steps"] for line in (short / "metrics.jsonl").read_text().splitlines()]
    assert steps[0] == SMOKE_STEP and steps[-1] == SMOKE_BUDGET, steps


@pytest.mark.slow
def test_the_getting_started_page_runs_top_to_bottom(tmp_path, monkeypatch, capsys):
    commands = embodirl_commands(DOCS / "getting-started.md")
    assert {"embodirl-train", "embodirl-eval", "embodirl-report"} <= {argv[0] for argv in commands}
    monkeypatch.chdir(tmp_path)
    run_page(commands, monkeypatch, capsys)
    check_first_run(tmp_path / "runs" / "first")


README = ROOT / "README.md"


def readme_lines() -> list[list[str]]:
    """The README's command lines, ``a && b`` split into two."""
    lines = []
    for argv in shell_commands(README):
        while "&&" in argv:
            at = argv.index("&&")
            lines.append(argv[:at])
            argv = argv[at + 1:]
        lines.append(argv)
    return lines


def ci_step(number: int) -> list[str]:
    """The command ``.ci/run`` runs as the README's step ``number`` (the first command after its comment)."""
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"# README step {number}"))
    command = next(line for line in lines[start + 1:] if line.strip() and not line.startswith(("#", "set ")))
    return shlex.split(command)


def test_the_readme_opens_with_the_install_and_the_test_command_ci_runs():
    first_block = shell_commands(README)[:2]
    assert first_block[0] == [*ci_step(1), "&&", "embodirl-train"]  # install, then the default run
    assert first_block[1] == ci_step(2) == ["python", "-m", "pytest", "-n", "2"]
    development = shell_commands(ROOT / "docs" / "development.md")
    assert ci_step(2) in development  # the development page names the same command


def test_the_documented_torch_requirement_is_the_package_s():
    from importlib.metadata import requires

    from packaging.requirements import Requirement

    (torch,) = [r for r in map(Requirement, requires("embodirl") or []) if r.name == "torch"]
    for page in (README, DOCS / "getting-started.md"):
        text = page.read_text()
        documented = re.findall(r'pip install "(torch[^"]*)" --index-url https://download.pytorch.org/whl/cpu', text)
        assert documented and all(Requirement(d).specifier == torch.specifier for d in documented), page.name
        assert "CUDA" in text  # what a stock machine gets


def test_the_readme_is_short_and_its_links_lead_somewhere():
    text = README.read_text()
    assert len(text.encode()) < 12_000
    links = re.findall(r"\]\((?!https?://)([^)#]+)(?:#[^)]*)?\)", text)
    assert links and all((ROOT / link).is_file() for link in links), [ln for ln in links if not (ROOT / ln).is_file()]


@pytest.mark.slow
def test_the_readme_runs_top_to_bottom(tmp_path, monkeypatch, capsys):
    commands = [argv for argv in readme_lines() if argv[0].startswith("embodirl-")]
    assert len(commands) >= 10
    monkeypatch.chdir(tmp_path)
    run_page(commands, monkeypatch, capsys)
    check_first_run(tmp_path / "runs" / "first")
    sweep = tmp_path / "runs" / "lr"
    jobs = [json.loads(path.read_text()) for path in sweep.glob("*/summary.json")]
    assert len(jobs) == 6 and all(job["status"] == "completed" for job in jobs)
    assert (sweep / "report" / "report.md").is_file()


def test_smoke_versions_keep_the_documented_overrides():
    assert smoke_version(["embodirl-train", "hydra.run.dir=runs/first", "trainer.total_env_steps=500000"]) == [
        "embodirl-train", "hydra.run.dir=runs/first", "trainer=debug", f"trainer.total_env_steps={SMOKE_BUDGET}"]
    assert smoke_version(["embodirl-train", "trainer.total_env_steps=20000"], "runs/x") == [
        "embodirl-train", "trainer=debug", f"trainer.total_env_steps={SMOKE_STEP}", "hydra.run.dir=runs/x"]
    assert smoke_version(["embodirl-train", "algo=grpo"], "runs/x") == [
        "embodirl-train", "algo=grpo", "trainer=debug", f"trainer.total_env_steps={SMOKE_DEFAULT}",
        "hydra.run.dir=runs/x"]
    assert smoke_version(["embodirl-train", "-m", "seed=0,1"], "runs/x") == [
        "embodirl-train", "-m", "seed=0,1", "trainer=debug", f"trainer.total_env_steps={SMOKE_DEFAULT}",
        "hydra.sweep.dir=runs/x-sweep"]
    assert smoke_eval(["embodirl-eval", "run=r"]) == ["embodirl-eval", "run=r", f"num_episodes={SMOKE_EPISODES}"]
    assert smoke_eval(["embodirl-eval", "run=r", "num_episodes=9"]) == ["embodirl-eval", "run=r", "num_episodes=9"]
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


@pytest.mark.slow  # the whole site with mkdocstrings; .ci/run's mkdocs gate builds it too
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


VOCABULARY = DOCS / "reference" / "vocabulary.md"


def renamed_table() -> dict[str, str]:
    """The vocabulary page's renamed keys: old -> new."""
    rows = re.findall(r"^\| `([\w.]+)` \| `([\w.]+)` \|", VOCABULARY.read_text(), re.MULTILINE)
    return dict(rows)


def test_the_renamed_keys_table_is_the_code_s():
    from embodirl.config import algos, training

    assert renamed_table() == {**algos.MOVED_KEYS, **training.MOVED_KEYS}


@pytest.mark.parametrize("old,new", list(renamed_table().items()))
def test_each_renamed_key_gets_its_renamed_to_line(old, new, monkeypatch, capsys):
    argv = ["embodirl-train", *(["algo=grpo"] if "first_done" in old else []), f"{old}=1"]
    assert run_script(argv, monkeypatch) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"it was renamed to {new}" in err[0], err


def python_file(page: Path, title: str) -> str:
    """The source of the page's ``python title="<title>"`` code block."""
    match = re.search(rf'^```python title="{re.escape(title)}"\n(.*?)^```', page.read_text(), re.S | re.M)
    assert match, f"{page.name} has no python block titled {title}"
    return match.group(1)


@pytest.mark.slow
def test_the_export_guide_runs_and_its_play_loop_returns_what_embodirl_eval_reports(tmp_path, monkeypatch, capsys):
    import runpy

    import numpy as np

    missing = [name for name in ("onnx", "onnxscript", "onnxruntime") if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(f"the export extra is not installed (missing: {', '.join(missing)}): pip install -e '.[export]'")
    page = DOCS / "guides" / "export.md"
    commands = embodirl_commands(page)
    assert [argv[0] for argv in commands] == ["embodirl-train", "embodirl-export", "embodirl-export", "embodirl-eval",
                                              "embodirl-eval", "embodirl-eval"]  # the last two: sim-to-sim
    monkeypatch.chdir(tmp_path)
    run_page(commands, monkeypatch, capsys)  # train (a smoke version), export ONNX and TorchScript, evaluate
    run = tmp_path / "runs" / "cartpole"
    assert {p.name for p in (run / "export").iterdir()} == {"onnx", "torchscript"}
    (tmp_path / "play.py").write_text(python_file(page, "play.py"))
    play = runpy.run_path(str(tmp_path / "play.py"))["play"]
    # embodirl-eval's one gymnasium env starts from this seed (GymEnv.reset: seed, reset count, env index) and
    # resets unseeded after each episode, as play() does.
    seed = int(np.random.SeedSequence([12345, 0, 0]).generate_state(1)[0])
    returns = play(str(run / "export" / "onnx"), num_episodes=3, seed=seed)
    (result,) = [json.loads(p.read_text()) for p in run.glob("eval/*/eval.json")]
    assert result["eval/num_episodes"] == 3 and len(set(returns)) > 1  # different episodes, not one repeated
    assert result["eval/return_mean"] == pytest.approx(sum(returns) / 3)


def test_the_docs_home_page_installs_runs_and_lists_every_console_script():
    home = DOCS / "index.md"
    first = shell_commands(home)[:2]
    assert first[0][:2] == ["pip", "install"] and first[1] == ["embodirl-train"], first
    scripts = {entry.name for entry in entry_points(group="console_scripts") if entry.name.startswith("embodirl-")}
    table = set(re.findall(r"^\| `(embodirl-[a-z]+)` \|", home.read_text(), re.MULTILINE))
    assert scripts and table == scripts


def test_the_extras_table_lists_every_extra():
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    rows = set(re.findall(r"^\| `([a-z0-9]+)` \|", (DOCS / "getting-started.md").read_text(), re.MULTILINE))
    assert set(extras) <= rows, set(extras) - rows


def test_no_module_points_at_a_readme_section():
    # The README keeps a Quickstart and links; a pointer such as README "Metrics" leads nowhere since the pages
    # moved to docs/. A README named by its path (launch/README.md) is a file, and must exist.
    for path in sorted((ROOT / "embodirl").rglob("*")):
        if path.suffix not in (".py", ".yaml"):
            continue
        for named in re.findall(r"([\w/-]*README(?:\.md)?)", path.read_text()):
            assert named.endswith(".md") and (ROOT / named).is_file(), f"{path.relative_to(ROOT)}: {named}"


def test_the_help_page_names_every_algorithm(capsys):
    from embodirl.cli.help import help_page

    algos = sorted(p.stem for p in (ROOT / "embodirl" / "conf" / "algo").glob("*.yaml"))
    assert f"(algo={'|'.join(algos)})" in help_page([]).splitlines()[0]
