"""The docs site (mkdocs.yml, docs/) builds with ``mkdocs build --strict``: every page is
in the navigation, every link and anchor leads somewhere, and the API reference is made
from the docstrings. The sabotaged copies show that a dead link, a dead anchor, a link
to a repository file that does not exist and a page left out of the navigation each
fail the build."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("mkdocs", reason="the docs site needs mkdocs (the test extra)")
pytest.importorskip("material", reason="the docs site needs mkdocs-material (the test extra)")
pytest.importorskip("mkdocstrings_handlers.python", reason="the docs site needs mkdocstrings[python] (the test extra)")

ROOT = Path(__file__).resolve().parent.parent


def _build(root: Path, site: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
                          cwd=root, capture_output=True, text=True, timeout=600, env=env)


def test_the_site_builds_strict_with_every_page_in_the_navigation(tmp_path: Path) -> None:
    done = _build(ROOT, tmp_path / "site")
    assert done.returncode == 0, done.stdout + done.stderr
    pages = sorted(p.stem for p in (ROOT / "docs").glob("*.md"))
    for page in pages:
        built = tmp_path / "site" / ("index.html" if page == "index" else f"{page}/index.html")
        assert built.exists(), page
    api = (tmp_path / "site" / "api" / "index.html").read_text(encoding="utf-8")
    import storetest

    for name in storetest.__all__:
        assert f'id="storetest.{name}"' in api, name  # mkdocstrings' anchor for each public name


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    shutil.copytree(ROOT / "docs", root / "docs")
    (root / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "docs_hooks.py", root / "scripts")
    # Without the API reference (the slowest part, and built above): the sabotaged builds
    # are about links and navigation.
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert "  - mkdocstrings:\n" in config
    (root / "mkdocs.yml").write_text(config.split("  - mkdocstrings:\n", 1)[0], encoding="utf-8")
    (root / "docs" / "api.md").write_text("# API reference\n", encoding="utf-8")
    shutil.copy(ROOT / "README.md", root)
    (root / "src").symlink_to(ROOT / "src")
    (root / "tests").symlink_to(ROOT / "tests")
    (root / "examples").symlink_to(ROOT / "examples")
    return root


def _append(page: str, text: str) -> Callable[[Path], None]:
    def sabotage(root: Path) -> None:
        path = root / "docs" / page
        path.write_text(path.read_text(encoding="utf-8") + text, encoding="utf-8")
    return sabotage


def _leave_out_of_nav(root: Path) -> None:
    config = root / "mkdocs.yml"
    text = config.read_text(encoding="utf-8")
    assert "  - Performance: performance.md\n" in text
    config.write_text(text.replace("  - Performance: performance.md\n", ""), encoding="utf-8")


def test_the_copy_the_sabotages_start_from_builds(tmp_path: Path) -> None:
    """The control: unsabotaged, the copy below builds, so each failure is its sabotage's."""
    done = _build(_copy(tmp_path), tmp_path / "site")
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(("sabotage", "said"), [
    (_append("options.md", "\nSee [the lost page](lost.md).\n"), "lost.md"),
    (_append("options.md", "\nSee [a section](reliability.md#no-such-section).\n"), "no-such-section"),
    (_append("architecture.md", "\nSee [the file](../tests/no_such_test.py).\n"), "no_such_test.py"),
    (_leave_out_of_nav, "performance.md"),
], ids=["dead link", "dead anchor", "dead repository link", "page not in nav"])
def test_a_broken_site_fails_the_build(tmp_path: Path, sabotage: Callable[[Path], None], said: str) -> None:
    root = _copy(tmp_path)
    sabotage(root)
    done = _build(root, tmp_path / "site")
    assert done.returncode != 0, done.stdout + done.stderr
    assert said in done.stdout + done.stderr
