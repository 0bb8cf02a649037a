"""Every defect listed by an SDK module in tests/ecosystem is still there: its repro runs.

A deterministic repro (it forces the interleaving) must show its defect on every run:
if it stops, the defect was fixed upstream (or the SDK changed), so this test goes red
and ``docs/ecosystem.md`` must be regenerated. A repro of a race that can only be
provoked runs a bounded loop; missing it is an expected failure (xfail) naming its
measured miss rate, never a red run on luck.

An SDK module may list ``REQUIRES`` (the import names its stores need) and ``INSTALL``
(the command that installs them). Outside CI a missing SDK skips its repros with that
command; in CI (``CI`` or ``STORETEST_REQUIRE`` set, as ``.ci/run`` does) it fails.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
import types
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from storetest.clauses import CLAUSES

ROOT = Path(__file__).resolve().parent.parent.parent
SDKS = ("openai_agents", "langchain", "adk", "langgraph", "agent_framework", "llama_index")
_IN_CI = bool(os.environ.get("CI") or os.environ.get("STORETEST_REQUIRE"))


def _modules() -> list[tuple[str, ModuleType]]:
    found = []
    for sdk in SDKS:
        try:
            found.append((sdk, importlib.import_module(f"tests.ecosystem.{sdk}")))
        except ModuleNotFoundError as exc:
            if exc.name in (f"tests.ecosystem.{sdk}",):
                continue  # that SDK's module is not written (yet)
            found.append((sdk, _Missing(sdk, str(exc))))  # type: ignore[arg-type]
    return found


class _Missing:
    """An SDK module that would not import (its SDK is missing)."""

    def __init__(self, sdk: str, error: str) -> None:
        self.sdk, self.error = sdk, error
        self.DEFECTS: list[Any] = []
        self.CONTENDERS: list[Any] = []


MODULES = _modules()


def _missing_requirement(module: Any) -> str:
    if isinstance(module, _Missing):
        return module.error
    for name in getattr(module, "REQUIRES", ()):
        if importlib.util.find_spec(name) is None:
            return f"no module named {name!r}"
    return ""


def _require(module: Any, sdk: str) -> None:
    missing = _missing_requirement(module)
    if not missing:
        return
    install = getattr(module, "INSTALL", f"pip install -e '.[all]' (for tests.ecosystem.{sdk})")
    message = f"tests.ecosystem.{sdk}: {missing}; install it with {install}"
    if _IN_CI:
        pytest.fail(f"{message} (CI runs the ecosystem repros: they must not be skipped)")
    pytest.skip(message)


def _skip_optional(module: Any, repro: Path) -> None:
    """An SDK module's ``OPTIONAL`` stores do not install beside the pins (the reason is the
    value): their repros skip, in CI too, where they are not installed."""
    source = repro.read_text(encoding="utf-8")
    for name, why in getattr(module, "OPTIONAL", {}).items():
        if f"from {name} import" in source and importlib.util.find_spec(name) is None:
            pytest.skip(f"{name} is not installed: it does not install beside the pinned drivers ({why})")


def _repros() -> list[Any]:
    """One case per repro script, with every defect it shows (several verdicts can share a cause)."""
    by_repro: dict[tuple[str, str], list[Any]] = {}
    for sdk, module in MODULES:
        for d in module.DEFECTS:
            by_repro.setdefault((sdk, d.repro), []).append(d)
    return [pytest.param(sdk, dict(MODULES)[sdk], defects, id=f"{sdk}:{Path(repro).stem}")
            for (sdk, repro), defects in by_repro.items()]


def _load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"repro_{path.stem}", path)
    assert spec is not None and spec.loader is not None, f"cannot load {path}"
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("sdk", "module", "defects"), _repros())
def test_the_defect_is_still_there(sdk: str, module: Any, defects: list[Any], request: pytest.FixtureRequest) -> None:
    """The repro's main() returns normally: it saw the defect through the store's own API.
    Its parameters are fixture names (``storetest_mysql_url``...): under pytest a repro
    runs on the test run's servers; alone, it starts throwaway ones."""
    _require(module, sdk)
    defect = defects[0]
    assert len({d.deterministic for d in defects}) == 1, f"{defect.repro}: deterministic for some verdicts only"
    _skip_optional(module, ROOT / defect.repro)
    repro = _load(ROOT / defect.repro)
    arguments = {name: request.getfixturevalue(name) for name in inspect.signature(repro.main).parameters}
    try:
        repro.main(**arguments)
    except AssertionError as exc:
        if defect.deterministic:
            raise AssertionError(
                f"{', '.join(f'{d.contender}: {d.clause}' for d in defects)}: the deterministic repro "
                f"{defect.repro} no longer shows the defect ({exc}); if the SDK fixed it, drop the Defect and "
                "regenerate docs/ecosystem.md"
            ) from exc
        pytest.xfail(f"the race was not provoked this run (measured miss rate {defect.miss_rate}): {exc}")


@pytest.mark.parametrize(("sdk", "module"), [pytest.param(s, m, id=s) for s, m in MODULES])
def test_every_defect_names_a_contender_a_clause_and_a_repro(sdk: str, module: Any) -> None:
    """What the table links to exists: the contender, the clause, the repro with a main();
    a provoked race states its miss rate."""
    if isinstance(module, _Missing):
        _require(module, sdk)
    names = {c.name for c in module.CONTENDERS}
    clauses = {c.name for c in CLAUSES}
    for d in module.DEFECTS:
        assert d.contender in names, f"{d.repro}: no contender named {d.contender!r} in tests.ecosystem.{sdk}"
        assert d.clause in clauses, f"{d.repro}: no clause named {d.clause!r}"
        path = ROOT / d.repro
        assert path.is_file(), f"{d.contender}, {d.clause}: the repro {d.repro} does not exist"
        assert "def main(" in path.read_text(encoding="utf-8"), f"{d.repro} has no main()"
        assert d.deterministic or d.miss_rate, f"{d.repro}: a provoked race must state its measured miss rate"


def test_a_missing_sdk_skips_outside_ci_naming_the_install_and_fails_in_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    module = types.SimpleNamespace(REQUIRES=("storetest_no_such_sdk",), INSTALL="pip install -e '.[fake]'")
    monkeypatch.setattr(sys.modules[__name__], "_IN_CI", False)
    with pytest.raises(pytest.skip.Exception, match=r"no module named 'storetest_no_such_sdk'.*\.\[fake\]"):
        _require(module, "fake")
    monkeypatch.setattr(sys.modules[__name__], "_IN_CI", True)
    with pytest.raises(pytest.fail.Exception, match="must not be skipped"):
        _require(module, "fake")
