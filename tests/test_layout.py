"""The package reads as the pipeline: no module imports from a floor above its own, and the tests mirror it."""

from __future__ import annotations

import ast
import functools
import graphlib
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

import embodirl

ROOT = Path(embodirl.__file__).parent
TESTS = Path(__file__).parent

# One floor per folder, top down (docs/architecture.md numbers them): a module imports from its own folder or a
# folder below it, never from one above nor from a neighbour on the same floor (two folders that may import each
# other are one folder in two places). Below them all, errors.py and the package's face import nothing of it.
LAYOUT = ("cli", "app", "training", "analysis", "algos", "collect", "policies", "envs", "conf", "runtime", "config",
          "accel")
FLOORS = {folder: len(LAYOUT) - i for i, folder in enumerate(LAYOUT)} | {"errors": 0, "__init__": 0}


def _floor(module: str) -> int:
    part = module.split(".")[1] if module.count(".") else "__init__"
    return FLOORS[part]


def _imported_by_name(node: ast.AST) -> str | None:
    """The module an ``importlib.import_module("embodirl...")`` call names: an import all the same."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute | ast.Name)
            and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id) == "import_module"
            and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
            and node.args[0].value.startswith("embodirl")):
        return node.args[0].value
    return None


@functools.cache
def _parsed(path: Path) -> ast.Module:
    """The syntax tree of a package file, parsed once for every test of this module (none changes it)."""
    return ast.parse(path.read_text(encoding="utf-8"))


def _imports(path: Path) -> list[tuple[int, str]]:
    """``(line, module)`` of every ``embodirl`` import in a file, including imports inside functions and modules
    imported by name; ``from package import module`` names the module."""
    found = []
    for node in ast.walk(_parsed(path)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("embodirl"):
            names = [f"{node.module}.{a.name}" for a in node.names]
            found += [(node.lineno, n if n in MODULES or node.module == "embodirl" else node.module) for n in names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("embodirl")]
        elif (by_name := _imported_by_name(node)) is not None:
            found.append((node.lineno, by_name))
    return found


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(("embodirl", *(parts[:-1] if parts[-1] == "__init__" else parts)))


MODULES = {_module(p): p for p in sorted(ROOT.rglob("*.py"))}


def test_every_module_belongs_to_a_floor():
    unknown = sorted({p.relative_to(ROOT).parts[0] for p in ROOT.rglob("*.py")} - {f"{k}.py" for k in FLOORS}
                     - set(FLOORS))
    assert not unknown, f"modules outside the layout's floors: {unknown}"


def test_no_import_points_up_or_across_a_floor():
    upward = []
    for module, path in MODULES.items():
        for line, imported in _imports(path):
            if _floor(imported) > _floor(module):
                upward.append(f"{path.relative_to(ROOT.parent)}:{line} imports {imported}")
    assert not upward, "imports that point up a floor:\n" + "\n".join(upward)


def test_no_modules_import_each_other_in_a_circle():
    # Arrows only point down between floors, so a circle lies inside one folder (config/'s schema engine and the
    # schemas it checks; envs/'s wrappers and the function that applies them).
    graph = {module: {m for _, m in _imports(path) if m in MODULES and m != module} for module, path in MODULES.items()}
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        circle = " -> ".join(reversed(exc.args[1]))  # graphlib lists each module before the one importing it
        pytest.fail(f"modules that import each other in a circle (each imports the next): {circle}")


def test_the_schemas_floor_never_imports_torch_at_import_time():
    heavy = []
    for path in sorted((ROOT / "config").rglob("*.py")):
        tree = _parsed(path)
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
        for node in ast.walk(_parsed(path)):
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
