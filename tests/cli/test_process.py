"""A console script's process ends with main's status, after everything a normal exit would finish that matters."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from tests.conftest import TINY


def _script(body: str, tmp_path) -> subprocess.CompletedProcess:
    code = textwrap.dedent(f"""
        import atexit, pathlib, sys, threading, time
        from embodirl.cli.process import run_console_script
        out = pathlib.Path({str(tmp_path)!r})
        atexit.register(lambda: (out / "atexit").write_text("ran"))
        def late():
            time.sleep(0.3)
            (out / "thread").write_text("joined")
        def main():
            threading.Thread(target=late).start()
            sys.stdout.write("unflushed output")
            {body}
        run_console_script(main)
        (out / "after").write_text("never reached")
    """)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


@pytest.mark.parametrize(("body", "status", "stderr"), [
    ("return None", 0, ""), pytest.param("sys.exit(3)", 3, "", marks=pytest.mark.slow),  # a fresh process each
    ("sys.exit('config error line')", 1, "config error line\n"),
    pytest.param("return 2", 2, "", marks=pytest.mark.slow),
    ("raise KeyboardInterrupt", 130, "-c: aborted on Ctrl-C\n"),
])
def test_the_process_ends_with_mains_status_after_threads_atexit_and_flushed_output(body, status, stderr, tmp_path):
    done = _script(body, tmp_path)
    assert (done.returncode, done.stderr) == (status, stderr)
    assert done.stdout == "unflushed output"
    assert (tmp_path / "atexit").read_text() == "ran" and (tmp_path / "thread").read_text() == "joined"
    assert not (tmp_path / "after").exists()


def test_an_unexpected_exception_keeps_its_traceback_and_a_normal_exit(tmp_path):
    done = _script("raise RuntimeError('boom')", tmp_path)
    assert done.returncode == 1 and "Traceback" in done.stderr and "RuntimeError: boom" in done.stderr
    assert (tmp_path / "atexit").read_text() == "ran"


def test_an_idle_executor_worker_does_not_hold_the_exit(tmp_path):
    """torch.compile leaves a module-level ThreadPoolExecutor (torch/utils/_functools.py) whose worker stops only
    through concurrent.futures' threading exit hook: the script must run that hook before it joins threads."""
    code = textwrap.dedent("""
        from concurrent.futures import ThreadPoolExecutor
        from embodirl.cli.process import run_console_script
        pool = ThreadPoolExecutor(max_workers=2)  # never shut down, as torch's
        def main():
            print(pool.submit(sum, [1, 2]).result())
        run_console_script(main)
    """)
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError("the script hung at exit, waiting for the executor's idle worker") from exc
    assert (done.returncode, done.stdout, done.stderr) == (0, "3\n", "")


@pytest.mark.slow
def test_a_compiled_run_with_a_cold_inductor_cache_exits_right_after_its_summary(tmp_path):
    """A machine's first compiled run (an empty inductor cache) once printed its summary and hung at exit."""
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"), "WANDB_MODE": "offline"}
    args = [*TINY, "compile=true", f"hydra.run.dir={tmp_path / 'run'}"]
    with subprocess.Popen([sys.executable, "-m", "embodirl.cli.train", *args], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path) as proc:
        deadline = threading.Timer(600, proc.kill)  # compiling from a cold cache takes a minute on a small machine
        deadline.start()
        try:
            lines = []
            for line in proc.stdout:
                lines.append(line)
                if line.startswith("└"):  # the summary table's last line
                    break
            summary_at = time.monotonic()
            assert any("embodirl-train summary" in line for line in lines), "".join(lines)
            code = proc.wait(timeout=15)
        except subprocess.TimeoutExpired as exc:
            raise AssertionError("the run printed its summary and did not exit within 15 s") from exc
        finally:
            deadline.cancel()
            if proc.poll() is None:
                proc.kill()
    assert (code, time.monotonic() - summary_at < 15) == (0, True)
