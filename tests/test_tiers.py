"""What keeps the fast tier fast: collecting it imports no compiler machinery.

Every test process imports every test module it collects, so a module-level import is paid by each xdist worker
whichever tests it runs; tests/conftest.py installs the deferred-dynamo hook so that tensordict's import does not
load ``torch._dynamo`` either.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
# Loaded by tracing, compiling, exporting to ONNX or profiling; a test that needs one imports it in its body.
HEAVY = ("torch._dynamo", "torch._inductor", "torch.onnx", "torch.profiler", "torch.export")


def module_level_imports(path: Path) -> list[str]:
    """The modules ``path`` imports outside any function or class."""
    names = []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names += [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
    return names


def test_no_test_module_imports_compiler_machinery_at_its_top():
    found = {f"{path.relative_to(TESTS)}: {name}" for path in TESTS.rglob("*.py")
             for name in module_level_imports(path) if name.startswith(HEAVY)}
    assert not found, f"import these inside the tests that trace, compile or export: {sorted(found)}"


def test_the_conftest_installs_the_deferred_dynamo_hook_before_torch():
    imports = module_level_imports(TESTS / "conftest.py")
    assert "embodirl.accel.deferred_dynamo" in imports and "torch" in imports
    assert imports.index("embodirl.accel.deferred_dynamo") < imports.index("torch")
