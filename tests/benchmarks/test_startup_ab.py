"""benchmarks/startup_ab.py: each checkout it is given is the code it times (no timing here)."""
import importlib.util
import os
import subprocess
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
_spec = importlib.util.spec_from_file_location("startup_ab", BENCHMARKS / "startup_ab.py")
startup_ab = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(startup_ab)


def test_a_checkout_runs_its_own_embodirl_even_from_another_checkouts_directory(tmp_path):
    other = tmp_path / "other"
    (other / "embodirl").mkdir(parents=True)
    (other / "embodirl" / "__init__.py").write_text("")
    argv, env = startup_ab.command(str(other))
    assert argv[-1] == startup_ab.CONSOLE
    # the same interpreter and flags, asked which embodirl it imports, started from this repository's root
    which = [*argv[:-1], "import embodirl, os; print(os.path.dirname(embodirl.__file__))"]
    out = subprocess.run(which, env=env, cwd=BENCHMARKS.parent, capture_output=True, text=True, check=True).stdout
    assert os.path.realpath(out.strip()) == os.path.realpath(other / "embodirl")
