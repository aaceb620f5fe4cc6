"""Fail points: named steps of the broker where a crash-point test makes the process die
(SIGKILL, as kill -9 does) or freeze (SIGSTOP, a pause) at that exact step, instead of
hoping that a kill from outside lands there.

They are armed only from the environment of a starting broker, e.g.
ONCEFLOW_FAILPOINTS="txn.after_prepare=kill", and each fires once. Unarmed, which is always
outside tests, a fail point costs one truth test of an empty dict, and they sit only on
the steps that end a transaction, never on produce or fetch.

The points (named by what is durable when they fire):
- txn.after_prepare: PrepareCommit or PrepareAbort is in the transaction log; no marker
  has been sent.
- txn.between_markers: the markers of the partitions led by this broker are appended;
  those of partitions led by other brokers are not sent yet.
- txn.before_complete: every marker is written; CompleteCommit or CompleteAbort is not.
- txn.complete_appended: CompleteCommit or CompleteAbort is in the leader's log, not yet
  replicated (nor fsynced); the next transaction's first record may follow it at once.

And of an application's dual write (onceflow.dualwrite, armed from the environment of the
application's process when its first DualWriter starts):
- dualwrite.after_prepare: the Kafka transaction is prepared; the database has nothing.
- dualwrite.after_db_commit: the database committed the unit; Kafka's commit is not sent.
- dualwrite.after_kafka_commit: Kafka committed; the unit is not marked completed.
- dualwrite.after_complete: the unit is marked completed.
"""

from __future__ import annotations

import logging
import os
import signal

__all__ = ["FAILPOINTS_ENV", "POINTS", "arm_from_environment", "failpoint", "parse"]

log = logging.getLogger(__name__)

FAILPOINTS_ENV = "ONCEFLOW_FAILPOINTS"
POINTS = frozenset(
    {
        "txn.after_prepare",
        "txn.between_markers",
        "txn.before_complete",
        "txn.complete_appended",
        "dualwrite.after_prepare",
        "dualwrite.after_db_commit",
        "dualwrite.after_kafka_commit",
        "dualwrite.after_complete",
    }
)
ACTIONS = {"kill": signal.SIGKILL, "pause": signal.SIGSTOP}

_armed: dict[str, signal.Signals] = {}


def parse(spec: str) -> dict[str, signal.Signals]:
    """`name=action[,name=action]` to {name: signal}; ValueError names what is wrong."""
    armed: dict[str, signal.Signals] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, action = item.partition("=")
        if name not in POINTS:
            known = ", ".join(sorted(POINTS))
            raise ValueError(f"{FAILPOINTS_ENV}: unknown fail point {name!r} (known: {known})")
        if action not in ACTIONS:
            raise ValueError(f"{FAILPOINTS_ENV}: {name} needs =kill or =pause, not {action!r}")
        armed[name] = ACTIONS[action]
    return armed


def arm_from_environment() -> None:
    """Called once as the broker starts; raises ValueError for a bad spec."""
    _armed.clear()
    _armed.update(parse(os.environ.get(FAILPOINTS_ENV, "")))
    for name, sig in _armed.items():
        log.warning("fail point %s armed: %s at that step", name, sig.name)


def failpoint(name: str) -> None:
    """Fire `name` if it is armed: SIGKILL ends the process here, SIGSTOP freezes it here
    until SIGCONT, after which it goes on as if nothing happened."""
    if not _armed:
        return
    sig = _armed.pop(name, None)
    if sig is not None:
        log.warning("fail point %s fires: %s", name, sig.name)
        for handler in logging.getLogger().handlers:
            handler.flush()
        os.kill(os.getpid(), sig)
