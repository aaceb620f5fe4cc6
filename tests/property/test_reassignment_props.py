"""The controller's reassignment rules against random histories: reassignments started,
replaced and cancelled, replicas catching up, brokers dying and coming back, with the
controller's passes (elections first, then reassignment steps) run to quiescence after each
event. Whatever happens: the leader is an in-sync member of the replica set, the ISR stays
within it, leader epochs only grow, and a reassignment whose target is in sync under a live
leader is complete."""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from onceflow.cluster.elections import StateChange, plan_elections
from onceflow.cluster.metadata import MetadataCache, TopicMetadata, VersionedState
from onceflow.cluster.reassignment import alter, plan_reassignments, target_of
from onceflow.cluster.znodes import NO_LEADER, BrokerRegistration, PartitionState, TopicAssignment
from onceflow.errors import ErrorCode

BROKERS = (1, 2, 3, 4, 5)
KEY = ("t", 0)

targets = st.none() | st.lists(st.sampled_from(BROKERS), min_size=1, max_size=3, unique=True)
events = st.one_of(
    st.tuples(st.just("alter"), targets),
    st.tuples(st.just("catch_up"), st.sampled_from(BROKERS)),
    st.tuples(st.just("kill"), st.sampled_from(BROKERS)),
    st.tuples(st.just("revive"), st.sampled_from(BROKERS)),
)


class Model:
    def __init__(self) -> None:
        self.cache = MetadataCache()
        self.alive = set(BROKERS)
        self._register()
        self.cache.topics["t"] = TopicMetadata("t", "id", {0: (1, 2, 3)}, {}, assignment_version=0)
        self.cache.states[KEY] = VersionedState(PartitionState(1, 0, (1, 2, 3), 1), 0)
        self.started: set[tuple[str, int, tuple[int, ...]]] = set()
        self.epochs = [0]

    def _register(self) -> None:
        self.cache.brokers = {b: BrokerRegistration(b, "h", 9000 + b, 0) for b in self.alive}

    @property
    def meta(self) -> TopicMetadata:
        return self.cache.topics["t"]

    @property
    def state(self) -> PartitionState:
        return self.cache.states[KEY].state

    def _set_state(self, state: PartitionState) -> None:
        version = self.cache.states[KEY].version
        self.cache.states[KEY] = VersionedState(state, version + 1)
        self.epochs.append(state.leader_epoch)

    def _set_assignment(self, assignment: TopicAssignment) -> None:
        self.cache.topics["t"] = dataclasses.replace(
            self.meta,
            assignment=assignment.partitions,
            adding=assignment.adding,
            removing=assignment.removing,
            assignment_version=self.meta.assignment_version + 1,
        )

    def apply(self, event: tuple[str, Any]) -> None:
        kind, arg = event
        if kind == "alter":
            current = TopicAssignment(
                "id", self.meta.assignment, self.meta.adding, self.meta.removing
            )
            target = None if arg is None else tuple(arg)
            updated, results = alter(current, {0: target}, self.alive)
            if results[0][0] is ErrorCode.none:
                self._set_assignment(updated)
        elif kind == "catch_up":  # the leader lets a caught-up follower into the ISR
            state, b = self.state, int(arg)
            replicas = self.meta.assignment[0]
            if (
                state.leader in self.alive
                and b in self.alive
                and b in replicas
                and b not in state.isr
            ):
                self._set_state(dataclasses.replace(state, isr=(*state.isr, b)))
        elif kind == "kill":
            self.alive.discard(int(arg))
            self._register()
        else:
            self.alive.add(int(arg))
            self._register()
        self.settle()

    def _write(self, changes: list[StateChange]) -> None:
        for change in changes:
            assert change.expected_version == self.cache.states[KEY].version
            assert change.state.leader_epoch > self.state.leader_epoch
            self._set_state(change.state)

    def settle(self) -> None:
        for _ in range(20):
            changes = plan_elections(self.cache, 2, unclean=False)
            if changes:
                self._write(changes)
                continue
            plan = plan_reassignments(self.cache, 2, self.started)
            self._write(plan.bumps)
            self.started.update(plan.started)
            for done in plan.completions:
                assert done.assignment_version == self.meta.assignment_version
                [(_, state, version)] = done.states
                assert version == self.cache.states[KEY].version
                assert state.leader_epoch > self.state.leader_epoch
                self._set_state(state)
                self._set_assignment(done.assignment)
            if not plan.bumps and not plan.completions:
                return
        raise AssertionError("the controller never settles")

    def check(self) -> None:
        state, replicas = self.state, self.meta.assignment[0]
        assert set(state.isr) <= set(replicas) or self.meta.adding or self.meta.removing
        if state.leader != NO_LEADER:
            assert state.leader in state.isr
            assert state.leader in replicas
        assert self.epochs == sorted(self.epochs)
        ongoing = self.meta.adding.get(0) or self.meta.removing.get(0)
        if ongoing and state.leader in self.alive:
            target = target_of(replicas, self.meta.removing.get(0, ()))
            assert not set(target) <= set(state.isr), (target, state)
        if not ongoing:
            assert set(state.isr) <= set(replicas)


@given(st.lists(events, max_size=40))
def test_reassignment_histories_keep_the_invariants(history: list[tuple[str, Any]]) -> None:
    model = Model()
    for event in history:
        model.apply(event)
        model.check()
    # Every broker back and every replica caught up: whatever was started completes.
    for b in BROKERS:
        model.apply(("revive", b))
    for _ in range(3):
        for b in BROKERS:
            model.apply(("catch_up", b))
    assert not model.meta.adding and not model.meta.removing
    assert set(model.state.isr) == set(model.meta.assignment[0])
