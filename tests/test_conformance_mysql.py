"""The MySQL/MariaDB reference store against the whole conformance suite, in one call.

The store and its replica are two handles on one throwaway database, each taking a
connection per operation from its own factory, as two processes of one application
would. A second run hands each handle one shared connection instead, the other way an
application can give the store its connection.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from storetest import run_conformance

pytest.importorskip("pymysql")

from reference_stores.mysql import SCHEMA, MySQLStore
from storetest.databases import mysql_connection as connect


@pytest.fixture(scope="session")
def mysql_schema_url(storetest_mysql_url: str) -> str:
    """The throwaway database with the store's tables, applied once, as a migration is."""
    conn = connect(storetest_mysql_url)
    try:
        with conn.cursor() as cur:
            for statement in SCHEMA:
                cur.execute(statement)
        conn.commit()
    finally:
        conn.close()
    return storetest_mysql_url


def _factory_store(mysql_schema_url: str) -> MySQLStore:
    return MySQLStore(lambda: connect(mysql_schema_url))


def _shared_connection_store(mysql_schema_url: str) -> Iterator[MySQLStore]:
    conn: Any = connect(mysql_schema_url)
    try:
        yield MySQLStore(conn)
    finally:
        conn.close()


run_conformance(_factory_store, replica=_factory_store, name="mariadb")
run_conformance(
    _shared_connection_store, replica=_shared_connection_store, name="mariadb-shared-connection"
)
