"""The package reads as the pipeline: no module imports from a floor above its own, and the tests mirror it."""

from __future__ import annotations

import ast
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
