"""A response its schema refuses (a broker bug) closes that client's connection at once,
rather than leaving it waiting for an answer that never comes, and the broker serves on."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.broker import free_port
from tests.helpers.wire import RawConnection, request_class

from onceflow.broker.app import run_broker
from onceflow.broker.handlers import registry
from onceflow.broker.handlers.base import RequestContext
from onceflow.config import load_broker_config
from onceflow.protocol.api_versions import ApiKey


async def _broken_list_groups(ctx: RequestContext, _request: Any) -> Any:
    return ctx.response(throttle_time=0, error_code=0, groups=None)  # groups is not nullable


def test_a_response_that_does_not_encode_closes_the_connection_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(registry.HANDLERS, ApiKey.LIST_GROUPS, _broken_list_groups)
    port = free_port()
    config, _ = load_broker_config(
        None, {"listeners": f"127.0.0.1:{port}", "log.dirs": str(tmp_path / "data")}
    )
    bootstrap = f"127.0.0.1:{port}"

    def client() -> tuple[bool, int]:
        with RawConnection(bootstrap, timeout=10) as conn:
            conn.send_request(request_class(ApiKey.LIST_GROUPS, 4)(states_filter=()))
            closed = conn.closed_by_peer(timeout=10)  # an answer, or a wait, is False
        with RawConnection(bootstrap, timeout=10) as conn:  # the broker serves on
            versions = conn.call(
                request_class(ApiKey.API_VERSIONS, 3)(
                    client_software_name="t", client_software_version="1"
                )
            )
        return closed, int(versions.error_code)

    async def main() -> tuple[bool, int]:
        stop = asyncio.Event()
        serving = asyncio.create_task(run_broker(config, stop))
        try:
            for _ in range(200):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                    break
                except OSError:
                    await asyncio.sleep(0.05)
            return await asyncio.get_running_loop().run_in_executor(None, client)
        finally:
            stop.set()
            await asyncio.wait_for(serving, 30)

    closed, error = asyncio.run(main())
    assert closed, "the client got an answer, or waited for one that never came"
    assert error == 0
