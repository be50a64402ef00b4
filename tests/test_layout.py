"""The package reads as the pipeline: no module imports from a floor above its own, and the tests mirror it."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import embodirl

ROOT = Path(embodirl.__file__).parent
TESTS = Path(__file__).parent

# cli -> app -> training | analysis -> algos -> collect -> policies -> envs -> the ground floor.
FLOORS = {"cli": 7, "app": 6, "training": 5, "analysis": 5, "algos": 4, "collect": 3, "policies": 2, "envs": 1,
          "config": 0, "accel": 0, "runtime": 0, "errors": 0, "conf": 0, "__init__": 0}


def _floor(module: str) -> int:
    part = module.split(".")[1] if module.count(".") else "__init__"
    return FLOORS[part]


def _imports(path: Path) -> list[tuple[int, str]]:
    """``(line, module)`` of every ``embodirl`` import in a file, including imports inside functions."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("embodirl"):
            names = [f"{node.module}.{a.name}" for a in node.names] if node.module == "embodirl" else [node.module]
            found += [(node.lineno, n) for n in names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("embodirl")]
    return found


def _module(path: Path) -> str:
    return ".".join(("embodirl", *path.relative_to(ROOT).with_suffix("").parts))


def test_every_module_belongs_to_a_floor():
    unknown = sorted({p.relative_to(ROOT).parts[0] for p in ROOT.rglob("*.py")} - {f"{k}.py" for k in FLOORS}
                     - set(FLOORS))
    assert not unknown, f"modules outside the layout's floors: {unknown}"


def test_no_import_points_up_a_floor():
    upward = []
    for path in sorted(ROOT.rglob("*.py")):
        module = _module(path)
        for line, imported in _imports(path):
            if _floor(imported) > _floor(module):
                upward.append(f"{path.relative_to(ROOT.parent)}:{line} imports {imported}")
    assert not upward, "imports that point up a floor:\n" + "\n".join(upward)


def test_the_schemas_floor_never_imports_torch_at_import_time():
    heavy = []
    for path in sorted((ROOT / "config").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:  # module level only: a function may import torch when it is called
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            heavy += [f"{path.name}:{node.lineno} {n}" for n in names if n.split(".")[0] in ("torch", "tensordict")]
    assert not heavy, heavy


def test_tests_mirror_the_package():
    packages = {p.relative_to(ROOT).parent for p in ROOT.rglob("*.py")} - {Path(".")}
    test_dirs = {p.relative_to(TESTS) for p in TESTS.rglob("*") if p.is_dir() and p.name != "__pycache__"}
    missing = sorted(str(p) for p in packages if p.parts[0] != "conf" and p not in test_dirs)
    assert not missing, f"packages without a test folder: {missing}"


MAX_FUNCTION_LINES = 60


def _long_functions(limit: int) -> list[str]:
    """``file:line name (N lines)`` of every function or method in the package longer than ``limit`` lines
    (from ``def`` to its last line, docstring included)."""
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > limit:
                    found.append(f"{path.relative_to(ROOT.parent)}:{node.lineno} {node.name} ({length} lines)")
    return found


def test_no_function_over_60_lines():
    long = _long_functions(MAX_FUNCTION_LINES)
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines (split them into named steps):\n" + "\n".join(long)


# Measurement diaries: timings, speed-ups, machine loads and dates belong in commit messages and the benchmarks
# page; a comment or docstring says why. Precise on purpose: "0.02 s" of physics, "timeout in seconds",
# ``max_wall_time_s`` or an example path such as ``outputs/2026-11-22/...`` are not diaries.
DIARY = re.compile("|".join((
    r"\b\d[\d.,]*\s?(?:ns|us|µs|ms)\b",  # micro/milliseconds
    r"\b\d[\d.,]*\s?(?:s|min|ms|us)\s*->\s*\d",  # before -> after
    r"\b\d[\d.,]*\s?(?:x|times)\s+(?:faster|slower)\b",  # speed-ups
    r"\b\d[\d.,]*\s?[kM]?\s?(?:env )?steps/s\b",  # throughput
    r"\b(?:about|takes|took)\s+[\d.,-]+\s?(?:s|sec|seconds|min|minutes|h|hours)\b",  # how long something ran
    r"\bmeasured on (?:a |the )?(?:CPU|GPU|\d)",  # the machine a figure came from
    r"\bon \d+ (?:busy |CPU |GPU )?(?:cores|CPUs|GPUs)\b|\bunder load\b",
    r"(?<![/\w-])20\d\d-\d\d-\d\d\b",  # a date (not a run directory's path)
)), re.IGNORECASE)


def _prose(path: Path) -> Iterator[tuple[int, str]]:
    """``(line, text)`` of the comments and docstrings of a module, or the comments of a YAML file."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".yaml":
        yield from ((i, line.partition("#")[2]) for i, line in enumerate(text.splitlines(), 1) if "#" in line)
        return
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                yield from ((node.body[0].lineno + i, line) for i, line in enumerate(doc.splitlines()))


def _diaries(root: Path) -> list[str]:
    return [f"{path.relative_to(root.parent)}:{line}: {text.strip()}"
            for path in sorted(root.rglob("*")) if path.suffix in (".py", ".yaml")
            for line, text in _prose(path) if DIARY.search(text)]


def test_comments_and_docstrings_hold_no_measurement_diaries():
    found = _diaries(ROOT)
    assert not found, ("timings or dates in comments/docstrings (say why; figures go to the commit message or "
                       "docs/benchmarks):\n" + "\n".join(found))
