"""A result keeps its delegation's whole text output (up to `max_text_chars`, 4,000,000
characters by default), so a real Redis archive must read back a result of that size exactly,
though its JSON is larger than the bound other documents have."""

from __future__ import annotations

from adapters.redis_archive import open_redis_archive
from engine import DelegationResult, ResultMessage, RunRecord, Status, to_json
from tests.helpers.redis_server import RedisServer, redis_server

__all__ = ["redis_server"]  # the fixture, used by name below


async def test_the_redis_archive_reads_back_a_result_at_the_text_bound(
    redis_server: RedisServer,
) -> None:
    # 4,000,000 characters that JSON spells in 8,000,000 (newlines and tabs are escaped).
    text = "\n" * 2_000_000 + "é\t" * 1_000_000
    result = DelegationResult(
        delegation_id="d1",
        agent="remote",
        remote_protocol="a2a",
        status=Status.COMPLETED,
        run_id="run-1",
        summary="s",
        messages=(ResultMessage(role="assistant", text=text),),
    )
    assert len(to_json(result)) > 4 * 1024 * 1024
    async with open_redis_archive(redis_server.url) as archive:
        await archive.open_run(RunRecord(run_id="run-1", started_at=1.0, node="n"))
        await archive.record_results("run-1", [result])
        assert await archive.results("run-1") == [result]
