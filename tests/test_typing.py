"""After the README's editable install (``pip install -e .``, its first command), in a
fresh venv: ``mypy --strict`` on a store outside the repository sees storetest and its
types (setuptools' import-hook finder would hide them; ``package-dir`` in pyproject.toml
makes the install a plain path in a ``.pth`` file, which mypy follows), and since that
path is ``src/``, the clone's ``tests``, ``scripts``, ``benchmarks`` and ``examples`` are
not importable (docs/architecture.md, "Why a src layout")."""

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
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "\npip install -e . && storetest check " in readme
    install = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "-e", str(ROOT)],
                             capture_output=True, text=True, timeout=600, env=env)
    assert install.returncode == 0, install.stderr
    found = subprocess.run(
        [str(python), "-c", "import importlib.util as u; print([n for n in ('storetest', 'reference_stores', 'tests', "
         "'scripts', 'benchmarks', 'examples') if u.find_spec(n)])"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env, check=True)
    assert found.stdout.split() == ["['storetest',", "'reference_stores']"], found.stdout
    refused = subprocess.run([str(python), "-c", "import tests"], cwd=tmp_path, capture_output=True, text=True,
                             timeout=120, env=env)
    assert refused.returncode == 1 and "No module named 'tests'" in refused.stderr, refused.stderr
    (tmp_path / "mystore.py").write_text(STORE)
    done = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--python-executable",
                           str(python), "mystore.py"], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env=env)
    assert "Cannot find implementation or library stub" not in done.stdout, done.stdout
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 1 and errors[0].startswith("mystore.py:16:") and '"Message"' in errors[0], done.stdout
