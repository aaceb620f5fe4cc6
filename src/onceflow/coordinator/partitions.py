"""Which partitions of its internal topic a coordinator serves, loads, and at which epoch.

A coordinator serves the keys of the `__consumer_offsets` (or `__transaction_state`)
partitions it has loaded. On a cluster those are the partitions its broker leads, and they
come and go at run time: `begin` + `finish` around a partition's load, `drop` when the
broker stops leading it. While a partition loads its keys answer COORDINATOR_LOAD_IN_PROGRESS;
a partition neither loaded nor loading answers NOT_COORDINATOR.

Loads and unloads can arrive out of order (a slow load, a leader change during it), so, as in
Kafka's `maybeUpdateCoordinatorEpoch`, the newest epoch seen for a partition wins: a load or
unload carrying an older one is ignored. Every load gets a token, and a load whose token is
no longer the partition's (unloaded or loaded again meanwhile) installs nothing.

A single broker serves every partition: `load()` of a coordinator made with `serve_all`
loads them all (`begin(..., force=True)`). Until then the partitions are in an initial
state given at construction (loading, or served), and `serve_loaded_only()` leaves that
state for the cluster's: nothing served but what `load_partition` loaded.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from onceflow.errors import ErrorCode


@dataclass(frozen=True, slots=True)
class _Load:
    token: int
    epoch: int | None


_INITIAL = 0  # the token of the initial state's partitions: no real load behind it


class PartitionOwnership:
    def __init__(self, num_partitions: int, *, serve_all: bool, initially_loading: bool) -> None:
        """`serve_all`: start with every partition in the initial state, loading
        (`initially_loading`) or served, until `load()` or `serve_loaded_only()`."""
        self.num_partitions = num_partitions
        self._owned: dict[int, int | None] = {}  # served partition -> its coordinator epoch
        self._loading: dict[int, _Load] = {}
        self._latest_epoch: dict[int, int] = {}
        self._tokens = itertools.count(_INITIAL + 1)
        if serve_all:
            for partition in range(num_partitions):
                if initially_loading:
                    self._loading[partition] = _Load(_INITIAL, None)
                else:
                    self._owned[partition] = None
        self._initial = set(range(num_partitions)) if serve_all else set()

    # -- queries

    def owns(self, partition: int) -> bool:
        return partition in self._owned

    def loading(self, partition: int) -> bool:
        return partition in self._loading

    def error(self, partition: int) -> ErrorCode | None:
        """COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR, or None when served."""
        if partition in self._loading:
            return ErrorCode.coordinator_load_in_progress
        if partition not in self._owned:
            return ErrorCode.not_coordinator
        return None

    def epoch(self, partition: int) -> int | None:
        """The coordinator epoch a served partition was loaded with (None: not given)."""
        return self._owned.get(partition)

    @property
    def owned(self) -> frozenset[int]:
        return frozenset(self._owned)

    @property
    def loading_partitions(self) -> frozenset[int]:
        return frozenset(self._loading)

    # -- changes

    def serve_loaded_only(self) -> None:
        """Leave the initial state: its partitions are neither served nor loading now."""
        for partition in self._initial:
            self._owned.pop(partition, None)
            self._loading.pop(partition, None)
        self._initial.clear()

    def begin(self, partition: int, epoch: int | None, *, force: bool = False) -> int | None:
        """Start loading a partition; returns the load's token, or None to do nothing.

        Nothing is done for an epoch older than one already seen for the partition, nor for
        a partition already served or loading at this epoch (or when no epoch is given).
        A newer epoch starts over: whatever was served is forgotten by the caller.
        `force` (a single broker's `load()`) skips both checks.
        """
        latest = self._latest_epoch.get(partition)
        if not force:
            if epoch is not None and latest is not None and epoch < latest:
                return None
            busy = partition in self._owned or partition in self._loading
            if busy and (epoch is None or epoch == latest):
                return None
        if epoch is not None and (latest is None or epoch > latest):
            self._latest_epoch[partition] = epoch
        self._initial.discard(partition)
        token = next(self._tokens)
        self._owned.pop(partition, None)
        self._loading[partition] = _Load(token, epoch)
        return token

    def current(self, partition: int, token: int) -> bool:
        """Whether the load with this token is still the partition's."""
        load = self._loading.get(partition)
        return load is not None and load.token == token

    def finish(self, partition: int, token: int) -> bool:
        """The load is done: serve the partition, unless the load was superseded."""
        if not self.current(partition, token):
            return False
        self._owned[partition] = self._loading.pop(partition).epoch
        return True

    def abandon(self, partition: int, token: int) -> None:
        """The load failed: the partition is neither served nor loading."""
        if self.current(partition, token):
            del self._loading[partition]

    def drop(self, partition: int, epoch: int | None = None) -> bool:
        """Stop serving (or loading) a partition. False, and nothing changes, when `epoch`
        is older than one already seen for it: the unload is stale."""
        if epoch is not None:
            latest = self._latest_epoch.get(partition)
            if latest is not None and epoch < latest:
                return False
            self._latest_epoch[partition] = epoch
        self._initial.discard(partition)
        self._owned.pop(partition, None)
        self._loading.pop(partition, None)
        return True
