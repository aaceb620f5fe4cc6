"""The controller: one broker at a time, elected through ZooKeeper's ephemeral `/controller`.

Every broker runs a Controller; only the elected one acts. It watches the same cache as
every broker (brokers, topics, partition states) and, at each change, writes what
`elections.py` says must change: first states of new partitions, new leaders for partitions
whose leader died or is shutting down, dead followers out of the ISR. Every write is a
compare-and-set fenced by the controller epoch, so a controller that was paused and lost
its session learns it is fenced at its first write and resigns. A write that loses a
compare-and-set is dropped: the watch that brings the newer state triggers a new pass.

ElectLeaders requests reach it as znodes under /onceflow/elect_leaders (any broker writes
one; see ZkTopology.elect_leaders): in a pass with nothing else to change, it decides each
partition again on its own cache (`plan_requested_election`), writes the new leaders and
deletes the request. The requesting broker waits for the new leaders in its cache.

Partition reassignments are in the topics' assignment znodes (any broker starts one, see
`reassignment.py`); in a pass with nothing else to change, it writes their next step: the
leader epoch bumped when it first sees one, then, once every target replica is in the ISR,
the new leader, ISR and replica set in one transaction.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from kazoo.exceptions import KazooException

from onceflow.clock import Clock
from onceflow.cluster.elections import (
    ElectionType,
    StateChange,
    plan_elections,
    plan_preferred_leaders,
    plan_requested_election,
)
from onceflow.cluster.link import ClusterLink, MetadataChange
from onceflow.cluster.reassignment import ongoing, plan_reassignments
from onceflow.cluster.zk_store import ControllerFenced, Election, MetadataStoreError, StaleVersion

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    unclean_leader_election: bool = False
    auto_leader_rebalance: bool = True
    imbalance_check_interval_s: float = 300.0
    imbalance_percent: int = 10


class Controller:
    def __init__(
        self, link: ClusterLink, broker_id: int, settings: ControllerSettings, clock: Clock
    ) -> None:
        self.link = link
        self.broker_id = broker_id
        self.settings = settings
        self.clock = clock
        self.election: Election | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._rebalance: asyncio.Task[None] | None = None
        self._requests_done: set[str] = set()  # election requests acted on, until deleted
        #: Reassignments (topic, partition, replicas) whose leader epoch this controller bumped.
        self._reassign_started: set[tuple[str, int, tuple[int, ...]]] = set()
        link.listeners.append(self._changed)

    @property
    def active(self) -> bool:
        return self.election is not None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())
        if self.settings.auto_leader_rebalance:
            self._rebalance = asyncio.get_running_loop().create_task(self._rebalance_loop())
        self._wake.set()

    async def stop(self) -> None:
        for task in (self._task, self._rebalance):
            if task is not None:
                task.cancel()
        for task in (self._task, self._rebalance):
            if task is not None:
                await asyncio.gather(task, return_exceptions=True)

    def _changed(self, change: MetadataChange) -> None:
        if change.kind == "session" and self.link.session_lost and self.election is not None:
            self._resign("its ZooKeeper session was lost")
        self._wake.set()

    def _resign(self, why: str) -> None:
        log.warning("broker %d resigns as controller: %s", self.broker_id, why)
        self.election = None
        self._reassign_started.clear()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self._pass()
            except asyncio.CancelledError:
                raise
            except (KazooException, MetadataStoreError) as exc:
                # ZooKeeper away or changing servers: the next pass tries again.
                log.warning("controller pass failed: %r; retrying", exc)
                await asyncio.sleep(1.0)
                self._wake.set()
            except Exception:
                log.exception("controller pass failed; retrying")
                await asyncio.sleep(1.0)
                self._wake.set()

    async def _pass(self) -> None:
        cache = self.link.cache
        if self.election is not None and cache.controller_id not in (None, self.broker_id):
            self._resign(f"broker {cache.controller_id} is the controller now")
        if self.election is None:
            if cache.controller_id is not None or self.link.session_lost:
                return
            election = await asyncio.to_thread(
                self.link.store.try_elect, self.broker_id, self.clock.now_ms()
            )
            if election is None:
                return
            log.info("broker %d is the controller (epoch %d)", self.broker_id, election.epoch)
            self.election = election
        changes = plan_elections(cache, self.election.epoch, self.settings.unclean_leader_election)
        await self._write(changes)
        if not changes:  # requests see the states this pass would have written
            await self._requested_elections()
            await self._reassignments()

    async def _requested_elections(self) -> None:
        """Act on the pending ElectLeaders requests, then delete them."""
        cache = self.link.cache
        pending = sorted(set(cache.election_requests) - self._requests_done)
        self._requests_done &= set(cache.election_requests)
        if not pending or self.election is None:
            return
        changes: dict[tuple[str, int], StateChange] = {}
        for name in pending:
            request = cache.election_requests[name]
            try:
                kind = ElectionType(request.election_type)
            except ValueError:
                log.warning(
                    "controller: ignoring election request %s of type %d",
                    name,
                    request.election_type,
                )
                continue
            for topic, partition in request.partitions:
                planned = plan_requested_election(
                    cache, self.election.epoch, kind, topic, partition
                )
                if planned.change is not None:
                    changes.setdefault((topic, partition), planned.change)
        await self._write(list(changes.values()))
        for name in pending:
            self._requests_done.add(name)
            await asyncio.to_thread(self.link.store.finish_election, name)

    async def _reassignments(self) -> None:
        """Write the next step of every partition reassignment (see reassignment.py)."""
        election = self.election
        if election is None:
            return
        cache = self.link.cache
        current = {(t, p, r[0]) for (t, p), r in ongoing(cache).items()}
        self._reassign_started &= current
        plan = plan_reassignments(cache, election.epoch, self._reassign_started)
        if plan.bumps:
            await self._write(plan.bumps)
            self._reassign_started.update(plan.started)
        for done in plan.completions:
            try:
                await asyncio.to_thread(
                    self.link.store.finish_reassignment,
                    done.topic,
                    done.assignment,
                    done.assignment_version,
                    list(done.states),
                    election,
                )
            except ControllerFenced as exc:
                self._resign(str(exc))
                return
            except StaleVersion as exc:
                log.info("controller: %s; the next pass sees the newer state", exc)
                continue
            for partition, state, _ in done.states:
                log.info(
                    "controller: %s-%d reassigned to %s: leader %d, epoch %d, ISR %s",
                    done.topic,
                    partition,
                    list(done.assignment.partitions[partition]),
                    state.leader,
                    state.leader_epoch,
                    list(state.isr),
                )

    async def _write(self, changes: list[StateChange]) -> None:
        election = self.election
        if election is None:
            return
        store = self.link.store
        new: dict[str, dict[int, StateChange]] = {}
        for change in changes:
            if change.expected_version < 0:
                new.setdefault(change.topic, {})[change.partition] = change
        try:
            for topic, created in new.items():
                states = {p: c.state for p, c in created.items()}
                try:
                    await asyncio.to_thread(store.create_partition_states, topic, states, election)
                except StaleVersion as exc:
                    if isinstance(exc, ControllerFenced):
                        raise
                    log.info("controller: %s", exc)
            updates = [c for c in changes if c.expected_version >= 0]
            batch = [(c.topic, c.partition, c.state, c.expected_version) for c in updates]
            written = bool(updates) and await asyncio.to_thread(
                store.update_partition_states, batch, election
            )
            if written:
                # All in one ZooKeeper round trip: a broker's death moves every leadership
                # it had at once, however many partitions.
                for change in updates:
                    _log_change(change)
                return
            for change in updates:  # one lost its compare-and-set: each on its own
                _log_change(change)
                try:
                    await asyncio.to_thread(
                        store.update_partition_state,
                        change.topic,
                        change.partition,
                        change.state,
                        change.expected_version,
                        election,
                    )
                except StaleVersion as exc:
                    if isinstance(exc, ControllerFenced):
                        raise
                    log.info("controller: %s; the next pass sees the newer state", exc)
        except ControllerFenced as exc:
            self._resign(str(exc))
        except MetadataStoreError as exc:
            log.warning("controller: %s", exc)

    async def _rebalance_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.imbalance_check_interval_s)
            if self.election is None:
                continue
            try:
                await self._write(
                    plan_preferred_leaders(
                        self.link.cache, self.election.epoch, self.settings.imbalance_percent
                    )
                )
            except Exception:
                log.exception("preferred-leader rebalance failed")


def _log_change(change: StateChange) -> None:
    log.info(
        "controller: %s-%d %s: leader %d, epoch %d, ISR %s",
        change.topic,
        change.partition,
        change.reason,
        change.state.leader,
        change.state.leader_epoch,
        list(change.state.isr),
    )
