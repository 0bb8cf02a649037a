"""docs/contract.md is what scripts/contract_page.py makes of the code, and it shows every
value type, error class and clause the code has."""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import storetest.contract
from storetest.clauses import CLAUSES

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "contract_page.py"
PAGE = ROOT / "docs" / "contract.md"


@pytest.fixture(scope="module")
def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("contract_page", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def page() -> str:
    return PAGE.read_text(encoding="utf-8")


def test_the_page_is_what_the_code_says(generator: ModuleType, page: str) -> None:
    """Fails when a docstring, a field or a clause changed and the page was not regenerated."""
    assert page == generator.render(), "docs/contract.md is stale: run python scripts/contract_page.py"


def test_a_changed_clause_docstring_makes_the_page_stale(
    generator: ModuleType, page: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(CLAUSES[0].run, "__doc__", "A promise nobody wrote down.")
    assert generator.render() != page


def test_check_flag_exits_1_on_a_stale_page_and_0_on_a_current_one(tmp_path: Path, page: str) -> None:
    current, stale = tmp_path / "current.md", tmp_path / "stale.md"
    current.write_text(page, encoding="utf-8")
    stale.write_text(page.replace("byte for byte", "more or less"), encoding="utf-8")
    ran = [
        subprocess.run([sys.executable, str(SCRIPT), "--check", "--output", str(path)],
                       capture_output=True, text=True, cwd=tmp_path, check=False)
        for path in (current, stale)
    ]
    assert ran[0].returncode == 0, ran[0].stdout + ran[0].stderr
    assert ran[1].returncode == 1
    assert "+" in ran[1].stdout and "is stale" in ran[1].stderr


@pytest.mark.parametrize("clause", CLAUSES, ids=lambda c: c.name)
def test_every_clause_has_an_anchored_section_with_its_whole_docstring(
    generator: ModuleType, page: str, clause: object
) -> None:
    name, doc, topic = clause.name, clause.doc, clause.topic  # type: ignore[attr-defined]
    assert f'<a id="clause-{name}"></a>' in page
    assert f'<a id="topic-{topic}"></a>' in page
    section = page.split(f'<a id="clause-{name}"></a>', 1)[1]
    assert generator.markdown(doc) in section.split('<a id="', 1)[0]


def test_every_error_class_value_type_and_field_is_on_the_page(page: str) -> None:
    exported = [getattr(storetest.contract, n) for n in storetest.contract.__all__]
    errors = [e for e in exported if inspect.isclass(e) and issubclass(e, Exception)]
    assert storetest.contract.StoreError in errors
    for error in errors:
        assert f"#### `{error.__name__}(" in page
    for value_type in [v for v in exported if inspect.isclass(v) and dataclasses.is_dataclass(v)]:
        assert f"#### `{value_type.__name__}`" in page
        for field in dataclasses.fields(value_type):
            assert f"| `{field.name}` |" in page
    for role in storetest.contract.ROLES:
        assert f"`'{role}'`" in page


def test_every_method_of_the_protocol_is_documented(page: str) -> None:
    for name in ("save", "messages", "add_steer", "take_steers"):
        method = getattr(storetest.contract.Store, name)
        assert f"async def {name}(" in page
        assert " ".join((method.__doc__ or "").split()[:5]) in " ".join(page.split())


def test_the_readme_links_the_page() -> None:
    assert "(docs/contract.md)" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_everything_the_contract_and_codec_export_is_importable_from_storetest() -> None:
    """The page says so (``from storetest import Message, Text, StoreError``)."""
    import storetest
    import storetest.codec

    for module in (storetest.contract, storetest.codec):
        assert set(module.__all__) <= set(storetest.__all__), module.__name__
