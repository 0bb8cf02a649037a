"""PostgresSaver.setup() (the sync class) run by four savers at once, each on a thread
of its own, on a fresh database fails (``UniqueViolation`` on
``pg_type_typname_nsp_index``), as AsyncPostgresSaver's does: ``CREATE TABLE IF NOT
EXISTS`` racing itself, with no lock around the migrations. One run of four; the bounded
loop tries up to 10 fresh databases."""

from __future__ import annotations

import threading

from langgraph.checkpoint.postgres import PostgresSaver

from storetest import databases
from storetest._engine.backends import fresh_fixtures


def _round(url: str) -> list[BaseException]:
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def one() -> None:
        try:
            with PostgresSaver.from_conn_string(url) as saver:
                start.wait()
                saver.setup()
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def main(storetest_postgres_url: str | None = None) -> None:
    if storetest_postgres_url is None:
        with databases.throwaway("postgres") as url:
            main(url)
        return
    for _ in range(10):
        with fresh_fixtures({"storetest_postgres_url": storetest_postgres_url}) as made:
            errors = _round(made["storetest_postgres_url"])
        if errors:
            assert any("UniqueViolation" in type(e).__name__ or "duplicate key" in str(e) for e in errors), errors
            return
    raise AssertionError("four setup() calls at once on a fresh database succeeded 10 times in a row")


if __name__ == "__main__":
    main()
