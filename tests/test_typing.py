"""After the README's editable install (``pip install -e .``), ``mypy --strict`` on a
store outside the repository sees storetest and its types (setuptools' import-hook
finder would hide them; ``package-dir`` in pyproject.toml makes the install a plain
path in a ``.pth`` file, which mypy follows)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

STORE = '''
from storetest import Message


class MyStore:
    def __init__(self) -> None:
        self.data: dict[str, list[Message]] = {}

    def save(self, session: str, messages: list[Message]) -> None:
        self.data[session] = list(messages)

    def messages(self, session: str) -> list[Message]:
        return list(self.data.get(session, []))


WRONG: int = Message.text("user", "hi")  # line 16: mypy must know what Message.text returns
'''


def test_mypy_strict_sees_storetest_after_the_readmes_editable_install(tmp_path: Path) -> None:
    # mypy asks the interpreter for its sys.path: a PYTHONPATH would show storetest whatever the install.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    # The README's command, without the dependencies (mypy needs storetest's own files only).
    install = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "-e", str(ROOT)],
                             capture_output=True, text=True, timeout=600, env=env)
    assert install.returncode == 0, install.stderr
    (tmp_path / "mystore.py").write_text(STORE)
    done = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--python-executable",
                           str(python), "mystore.py"], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env=env)
    assert "Cannot find implementation or library stub" not in done.stdout, done.stdout
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 1 and errors[0].startswith("mystore.py:16:") and '"Message"' in errors[0], done.stdout
