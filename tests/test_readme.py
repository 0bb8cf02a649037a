"""The README's two commands say what the second one needs, in the names the code
reads, and how long it takes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from storetest._engine.servers import mysql, postgres, redis, url_from_env

ROOT = Path(__file__).resolve().parent.parent


def _section(title: str) -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index(f"## {title}\n")
    return text[start:text.index("\n## ", start + 1)]


def test_the_two_commands_say_what_the_second_needs_and_how_long_it_takes(monkeypatch: pytest.MonkeyPatch) -> None:
    section = " ".join(_section("The two commands").split())
    for backend in ("postgres", "mysql", "redis"):
        name = f"STORETEST_{backend.upper()}_URL"
        monkeypatch.setenv(name, "x://y")
        assert url_from_env(backend) == "x://y", name  # the variable the README names is the one read
        assert f"`{name}`" in section
    assert "Docker" in section
    assert "`pg_config --bindir`" in section and "pg_config" in postgres.HOW_TO_ENABLE
    assert all(f"`{server}`" in section for server in mysql._SERVER_NAMES)
    assert "`redis-server`" in section and "redis-server" in redis.HOW_TO_ENABLE
    assert re.search(r"takes about [\d.\u2013-]+ minutes", section), section
    assert re.search(r"first .* takes about", section)
