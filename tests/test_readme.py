"""Every command and code block of the README is run here, as it is written there.

Each fenced block is preceded by ``<!-- readme-test: NAME -->``, and NAME is run by the
test of that name below (``RUNS``): a block without a name, or a name without a test,
fails. A protocol's test file is written as the README gives it into an empty
directory and run the two ways the README says, under pytest and with ``storetest
check``, each on a few of its clauses (the whole run of the SDK stores takes minutes;
docs/ecosystem.md has their full verdicts). Running them needs the SDKs (the ``all``
extra); the server lines need the throwaway servers, which they share with this run.
"""

from __future__ import annotations

import inspect
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from storetest import check, run_conformance
from storetest._engine.servers import mysql, postgres, redis, url_from_env

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
BLOCK = re.compile(r"<!-- readme-test: (?P<name>[\w-]+) -->\n```(?P<lang>\w*)\n(?P<body>.*?)```\n", re.S)
BIN = Path(sys.executable).parent


def _text() -> str:
    return README.read_text(encoding="utf-8")


def _blocks() -> dict[str, str]:
    found: dict[str, str] = {}
    for match in BLOCK.finditer(_text()):
        assert match["name"] not in found, f"two README blocks named {match['name']}"
        found[match["name"]] = match["body"]
    return found


def _section(title: str) -> str:
    text = _text()
    start = text.index(f"## {title}\n")
    return text[start:text.index("\n## ", start + 1)]


#: Each named README block and the test that runs it.
RUNS = {
    "the-two-commands": "test_the_first_command_runs_the_check_and_the_second_is_what_ci_runs",
    "openai-agents": "test_the_protocol_file_runs_both_ways",
    "openai-agents-run": "test_the_protocol_file_runs_both_ways",
    "langchain": "test_the_protocol_file_runs_both_ways",
    "langchain-run": "test_the_protocol_file_runs_both_ways",
    "adk": "test_the_protocol_file_runs_both_ways",
    "adk-run": "test_the_protocol_file_runs_both_ways",
    "transcripts": "test_the_protocol_file_runs_both_ways",
    "transcripts-run": "test_the_protocol_file_runs_both_ways",
    "entry-log": "test_the_protocol_file_runs_both_ways",
    "entry-log-run": "test_the_protocol_file_runs_both_ways",
    "servers": "test_the_server_lines_run_both_ways_on_each_server",
    "servers-run": "test_the_server_lines_run_both_ways_on_each_server",
    "failure": "test_the_failure_shown_is_what_the_command_prints",
    "failure-output": "test_the_failure_shown_is_what_the_command_prints",
    "ci": "test_the_ci_job_is_a_valid_github_workflow",
}


def test_every_code_block_is_named_and_run_by_a_test() -> None:
    text = _text()
    fences = len(re.findall(r"^```", text, re.M))
    blocks = _blocks()
    assert fences == 2 * len(blocks), "a README code block without <!-- readme-test: NAME --> before it"
    assert set(blocks) == set(RUNS), set(blocks) ^ set(RUNS)
    assert all(name in globals() for name in RUNS.values())


def test_the_readme_is_short_and_links_every_docs_page() -> None:
    text = _text()
    assert len(text.splitlines()) < 300
    for page in (ROOT / "docs").glob("*.md"):
        assert f"(docs/{page.name})" in text or f"(docs/{page.name}#" in text, page.name
    assert "(CHANGELOG.md)" in text


def test_every_extra_the_readme_installs_exists() -> None:
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    named = re.findall(r"pip install -e '\.\[([\w-]+)\]'", _text())
    assert {"all", "openai-agents", "langchain", "adk"} <= set(named)
    assert set(named) <= set(extras), set(named) - set(extras)
    assert "'storetest[postgres]'" in _text() and "postgres" in extras


def test_the_bugs_it_finds_are_on_the_ecosystem_page() -> None:
    """Each line of "What storetest finds" names a store and a defect the generated page has."""
    ecosystem = " ".join((ROOT / "docs" / "ecosystem.md").read_text(encoding="utf-8").split())
    lines = [line for line in _section("What storetest finds").splitlines() if line.startswith("- ")]
    assert 3 <= len(lines) <= 4
    stores = re.compile(r"`(\w+(?:Session|History|Service))`")
    for line in lines:
        (store,) = stores.findall(line)
        assert f"### {store}" in ecosystem, store
    for evidence in ("WRONGTYPE", "(1213)", "differ by case or trailing spaces are one history",
                     "events of one clock tick come back in the order of their ids"):
        assert evidence in ecosystem, evidence


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
    assert re.search(r"takes\s+about [\d.\u2013-]+ minutes", section), section
    assert re.search(r"first .* takes about", section)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STORETEST_", "PYTEST_"))}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return {**env, **extra}


def _run(command: str, cwd: Path, env: dict[str, str],
         extra: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    argv = shlex.split(command.split("#", 1)[0])
    if argv[0] == "pytest":
        argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *argv[1:]]
    else:
        assert argv[0] == "storetest", command
        argv = [str(BIN / "storetest"), *argv[1:]]
    return subprocess.run([*argv, *(extra or [])], cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


def test_the_first_command_runs_the_check_and_the_second_is_what_ci_runs(tmp_path: Path) -> None:
    """``pip install -e .`` in a fresh venv is tests/test_typing.py's (which also checks that
    ``import tests`` fails there); ``storetest check`` is run here, in an empty directory;
    the second command is the one ``.ci/run`` runs, line for line."""
    first, second = [line.split("#", 1)[0].strip() for line in _blocks()["the-two-commands"].splitlines()]
    install, check = (part.strip() for part in first.split("&&"))
    assert install == "pip install -e ."
    assert check == "storetest check"
    done = _run(check, tmp_path, _env(), ["-q"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"SQLiteStore: \d+ clauses: \d+ passed, 0 failed", done.stdout), done.stdout
    assert second in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()


#: For each protocol: the README block, the few clauses run here, and the exit status
#: both forms must give (ADK's own service fails its isolation clause, as the README says).
PROTOCOLS = {
    "openai-agents": ("agents", "items_keep_their_order or get_items_gives_the_latest", 0),
    "langchain": ("langchain_community", "items_round_trip_exactly or clear_session_empties_it", 0),
    "adk": ("google.adk", "adk_events_round_trip_exactly or adk_sessions_are_isolated", 1),
    "transcripts": ("reference_stores", "save_replaces_the_transcript or replicas_share_transcripts", 0),
    "entry-log": ("reference_stores", "log_append_order_is_kept or log_replicas_see_each_others_appends", 0),
}


def _write(name: str, where: Path) -> tuple[str, list[str]]:
    """Write the README's file for ``name`` into ``where``; return its name and commands."""
    body = _blocks()[name]
    file = re.match(r"# (test_\w+\.py)\n", body)
    assert file, body
    (where / file[1]).write_text(body, encoding="utf-8")
    line = _blocks()[f"{name}-run"].strip()
    pytest_form, check_form = (part.strip() for part in line.split("# or:"))
    assert pytest_form == f"pytest {file[1]}"
    assert check_form.startswith(f"storetest check {file[1]}:")
    return file[1], [pytest_form, check_form]


@pytest.mark.parametrize("protocol", list(PROTOCOLS))
def test_the_protocol_file_runs_both_ways(protocol: str, tmp_path: Path) -> None:
    module, clauses, status = PROTOCOLS[protocol]
    pytest.importorskip(module)
    _, commands = _write(protocol, tmp_path)
    for command in commands:
        done = _run(command, tmp_path, _env(), ["-k", clauses])
        assert done.returncode == status, command + "\n" + done.stdout + done.stderr
        if command.startswith("pytest"):
            summary = done.stdout.strip().splitlines()[-1]
            assert re.search(r"\b2 passed\b" if status == 0 else r"\b1 failed, 1 passed\b", summary), summary
        else:
            assert ("0 failed" if status == 0 else "1 failed") in done.stdout, done.stdout
        assert "error" not in done.stdout.strip().splitlines()[-1].lower() or status, done.stdout


def test_the_server_lines_run_both_ways_on_each_server(
    tmp_path: Path, storetest_postgres_url: str, storetest_mysql_url: str, storetest_redis_url: str
) -> None:
    """On this run's throwaway servers (the child run makes its own database or prefix on
    each), every line on one clause under pytest, and the MariaDB line with the command."""
    for module in ("langchain_community", "psycopg", "pymysql", "redis"):
        pytest.importorskip(module)
    _, (pytest_form, check_form) = _write("servers", tmp_path)
    env = _env(STORETEST_POSTGRES_URL=_server(storetest_postgres_url), STORETEST_MYSQL_URL=_server(storetest_mysql_url),
               STORETEST_REDIS_URL=storetest_redis_url, STORETEST_REQUIRE="postgres,mysql,redis")
    done = _run(pytest_form, tmp_path, env, ["-k", "items_round_trip_exactly", "-rA"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"\b3 passed\b", done.stdout.strip().splitlines()[-1]), done.stdout
    for name in ("postgres", "mariadb", "redis"):
        assert re.search(rf"PASSED .*{name}.*items_round_trip_exactly", done.stdout, re.I), (name, done.stdout)
    done = _run(check_form, tmp_path, env, ["-k", "items_round_trip_exactly", "-q"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed, 0 failed" in done.stdout, done.stdout


def _server(url: str) -> str:
    """The server of a throwaway database's URL: the child creates a database of its own there."""
    return url.rsplit("/", 1)[0] + "/" + ("postgres" if url.startswith("postgres") else "mysql")


def test_the_failure_shown_is_what_the_command_prints() -> None:
    blocks = _blocks()
    done = _run(blocks["failure"].strip(), ROOT, _env())
    assert done.returncode == 1, done.stdout + done.stderr
    timing = re.compile(r"\d+\.\d\ds$")
    printed = [timing.sub("T", line.rstrip()) for line in done.stdout.splitlines()]
    shown = [timing.sub("T", line.rstrip()) for line in blocks["failure-output"].splitlines()]
    start = printed.index(shown[0])
    assert printed[start:start + len(shown)] == shown, "\n".join(printed)


def test_the_ci_job_is_a_valid_github_workflow(tmp_path: Path) -> None:
    """The job validates against GitHub's workflow schema (check-jsonschema ships it, offline),
    names the variables storetest reads, and runs the README's own test file."""
    body = _blocks()["ci"]
    workflow = tmp_path / "storetest.yml"
    workflow.write_text(body, encoding="utf-8")
    exe = shutil.which("check-jsonschema") or f"{sys.executable} -m check_jsonschema"
    done = subprocess.run([*exe.split(), "--builtin-schema", "vendor.github-workflows", str(workflow)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "STORETEST_POSTGRES_URL: postgresql://" in body and "STORETEST_REQUIRE: postgres" in body
    file = re.match(r"# (test_\w+\.py)\n", _blocks()["transcripts"])
    assert file and f"pytest {file[1]} " in body


def test_every_option_the_readme_names_exists(tmp_path: Path) -> None:
    text = _section("Options")
    check_help = _run("storetest check --help", tmp_path, _env()).stdout
    pytest_help = _run("pytest --help", tmp_path, _env()).stdout
    flags = set(re.findall(r"`(--[a-z-]+)", text))
    assert {"--storetest-profile", "--profile", "--idle", "--storetest-idle", "--replica", "--reopen"} <= flags
    for flag in flags:
        assert flag in (pytest_help if flag.startswith("--storetest-") else check_help), flag
    known = set(inspect.signature(check).parameters) | set(inspect.signature(run_conformance).parameters)
    for keyword in re.findall(r"`(?:run_conformance\(f, )?(\w+)=", text):
        assert keyword in known, keyword
