"""A console script's process ends with main's status, after everything a normal exit would finish that matters."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest


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
    ("return None", 0, ""), ("sys.exit(3)", 3, ""), ("sys.exit('config error line')", 1, "config error line\n"),
    ("return 2", 2, ""),
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
