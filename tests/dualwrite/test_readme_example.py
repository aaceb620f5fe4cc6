"""The README's dual-write example runs as written, against a test broker and the test
PostgreSQL server (only its DSN and bootstrap servers are replaced)."""

from __future__ import annotations

import re
from pathlib import Path

from onceflow.dualwrite.database import Database
from tests.dualwrite.conftest import ROOT, new_database, query, read_committed
from tests.dualwrite.postgres import PostgresServer
from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import create_topic

SECTION = "## One transaction across a database and the log"


def readme_example() -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index(SECTION) :]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found is not None, "the section has no python example"
    return found.group(1)


def test_readme_example(broker: BrokerProcess, postgres: PostgresServer, tmp_path: Path) -> None:
    dsn = new_database("postgresql", postgres, tmp_path)
    db = Database(dsn)
    db.run_alone("CREATE TABLE orders (id BIGINT PRIMARY KEY, customer TEXT, total BIGINT)")
    db.close()
    create_topic(broker.bootstrap, "order-events")
    code = readme_example()
    assert "postgresql://app@db:5432/shop" in code and "localhost:9092" in code
    code = code.replace("postgresql://app@db:5432/shop", dsn)
    code = code.replace("localhost:9092", broker.bootstrap)
    exec(compile(code, "README.md", "exec"), {})
    assert query(dsn, "SELECT id, customer, total FROM orders") == [(17, "c-4", 990)]
    assert read_committed(broker.bootstrap, "order-events", 1) == [
        '{"order": 17, "type": "created"}'
    ]
