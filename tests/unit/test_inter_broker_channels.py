"""A peer's WriteTxnMarkers and the KIP-890 verifications sent to it travel on their own
connections (issue 26): a WriteTxnMarkers is answered only once its markers are
replicated, and a producer's first write to a partition must not wait behind it for its
verification. Each connection still carries one request at a time, so the markers of one
transaction, sent again after a failure, never overtake the first attempt; verifications
waiting for their connection go together in the next request."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from onceflow.broker import inter_broker
from onceflow.broker.inter_broker import InterBroker
from onceflow.cluster.metadata import MetadataCache
from onceflow.cluster.znodes import BrokerRegistration
from onceflow.coordinator.transaction.marker import TxnMarker
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey


class HeldPeer:
    """Stands for the peer broker: WriteTxnMarkers answers when `release` is set, a
    verification at once; `connections` counts the connections opened, `busy` the
    requests in flight on each."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.connections = 0
        self.max_in_flight = 0

    def connection(self, *_: Any) -> Any:
        peer = self
        peer.connections += 1
        in_flight = 0

        class Connection:
            async def request(self, api_key: int, version: int, body: Any) -> Any:
                nonlocal in_flight
                in_flight += 1
                peer.max_in_flight = max(peer.max_in_flight, in_flight)
                try:
                    if api_key == ApiKey.WRITE_TXN_MARKERS:
                        await peer.release.wait()
                        return SimpleNamespace(markers=())
                    return SimpleNamespace(error_code=0, results_by_transaction=())
                finally:
                    in_flight -= 1

            def close(self) -> None:
                pass

        return Connection()


def test_a_verification_does_not_wait_behind_a_marker_write(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def go() -> None:
        peer = HeldPeer()
        monkeypatch.setattr(inter_broker, "AsyncConnection", peer.connection)
        cache = MetadataCache(brokers={2: BrokerRegistration(2, "127.0.0.1", 9, 0)})
        peers = InterBroker(1, cache)
        marker = TxnMarker(7, 0, True, frozenset({("out", 0)}))
        writing = asyncio.ensure_future(peers.write(2, 0, [marker]))
        again = asyncio.ensure_future(peers.write(2, 0, [marker]))
        await asyncio.sleep(0)
        answer = await asyncio.wait_for(peers.verify(2, "t", 7, 0, [("in", 0)]), 5)
        # Answered (the stand-in leaves the partition out, which reads as refused) while
        # the markers still wait for their replication.
        assert list(answer) == [("in", 0)]
        assert not writing.done() and not again.done()
        peer.release.set()
        await asyncio.gather(writing, again)
        assert peer.connections == 2  # one for markers, one for verifications
        assert peer.max_in_flight == 1  # and one request at a time on each
        peers.close()

    asyncio.run(go())


class RecordingPeer:
    """Answers each AddPartitionsToTxn with NONE for every partition it names, after
    `release` for the first request; keeps every request it got."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.requests: list[Any] = []

    def connection(self, *_: Any) -> Any:
        peer = self

        class Connection:
            async def request(self, api_key: int, version: int, body: Any) -> Any:
                peer.requests.append(body)
                if len(peer.requests) == 1:
                    await peer.release.wait()
                results = tuple(
                    SimpleNamespace(
                        transactional_id=txn.transactional_id,
                        topic_results=tuple(
                            SimpleNamespace(
                                name=topic.name,
                                results_by_partition=tuple(
                                    SimpleNamespace(partition_index=p, partition_error_code=0)
                                    for p in topic.partitions
                                ),
                            )
                            for topic in txn.topics
                        ),
                    )
                    for txn in body.transactions
                )
                return SimpleNamespace(error_code=0, results_by_transaction=results)

            def close(self) -> None:
                pass

        return Connection()


def test_verifications_waiting_for_the_channel_share_one_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As Kafka's AddPartitionsToTxnManager: one entry per transactional id, each write
    answered for its own partitions; another epoch of an id waits for the next request."""

    async def go() -> None:
        peer = RecordingPeer()
        monkeypatch.setattr(inter_broker, "AsyncConnection", peer.connection)
        cache = MetadataCache(brokers={2: BrokerRegistration(2, "127.0.0.1", 9, 0)})
        peers = InterBroker(1, cache)
        first = asyncio.ensure_future(peers.verify(2, "a", 5, 0, [("x", 0)]))
        await asyncio.sleep(0)  # in flight, held
        produce = asyncio.ensure_future(peers.verify(2, "t", 7, 1, [("out", 0)]))
        offsets = asyncio.ensure_future(peers.verify(2, "t", 7, 1, [("__consumer_offsets", 3)]))
        zombie = asyncio.ensure_future(peers.verify(2, "t", 7, 0, [("out", 1)]))
        await asyncio.sleep(0)
        peer.release.set()
        answers = await asyncio.gather(first, produce, offsets, zombie)
        assert answers == [
            {("x", 0): ErrorCode.none},
            {("out", 0): ErrorCode.none},
            {("__consumer_offsets", 3): ErrorCode.none},
            {("out", 1): ErrorCode.none},
        ]
        assert len(peer.requests) == 3  # the held one, then "t" at epoch 1, then epoch 0
        (shared,) = peer.requests[1].transactions
        assert (shared.transactional_id, shared.producer_epoch, shared.verify_only) == (
            "t",
            1,
            True,
        )
        assert {(t.name, p) for t in shared.topics for p in t.partitions} == {
            ("out", 0),
            ("__consumer_offsets", 3),
        }
        (later,) = peer.requests[2].transactions
        assert later.producer_epoch == 0
        peers.close()

    asyncio.run(go())
