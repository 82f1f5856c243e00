"""The SQLite run archive's journal stores follow the store contract
(`engine.testing.check_journal_store`): every scenario's run is a run of one archive file, as
runs share a file in use."""

from __future__ import annotations

from pathlib import Path

from adapters.sqlite_archive import open_sqlite_archive
from engine.testing import check_journal_store


async def test_the_sqlite_journal_store_follows_the_store_contract(tmp_path: Path) -> None:
    async with open_sqlite_archive(tmp_path / "archive.db") as archive:
        await check_journal_store(archive.journal_store, max_examples=200)
        assert archive.statistics().failed_commits == 0
