"""What `onceflow groups` prints, laid out as kafka-consumer-groups.sh lays it out: the
listing, the --describe views (offsets and lag, members, state) and the reset plan.

Columns are padded as Kafka pads them, so scripts that split Kafka's output on whitespace
read ours; an empty value is "-" as in Kafka, so every row has every column. Group notices
(no active members, rebalancing) go to stderr, errors too, and the tables to stdout.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from onceflow.cli.common import CliError, UsageError

__all__ = [
    "STATE_NAMES",
    "TYPE_NAMES",
    "Group",
    "Offsets",
    "parse_filter",
    "print_listing",
    "print_members",
    "print_offsets",
    "print_reset_plan",
    "print_states",
    "state_name",
    "type_name",
]

MISSING = "-"
Tp = tuple[str, int]
#: A partition's offset, or the text of the error that kept it from us.
Offsets = dict[Tp, int | str]

#: Kafka's names (ConsumerGroupState.toString) of librdkafka's states.
STATE_NAMES = {
    "UNKNOWN": "Unknown",
    "PREPARING_REBALANCING": "PreparingRebalance",
    "COMPLETING_REBALANCING": "CompletingRebalance",
    "STABLE": "Stable",
    "DEAD": "Dead",
    "EMPTY": "Empty",
    "ASSIGNING": "Assigning",
    "RECONCILING": "Reconciling",
}
TYPE_NAMES = {"CLASSIC": "Classic", "CONSUMER": "Consumer", "SHARE": "Share"}
_REBALANCING = {"PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling"}


def state_name(state: Any) -> str:
    return STATE_NAMES.get(getattr(state, "name", str(state)), "Unknown")


def type_name(kind: Any) -> str:
    """Kafka's name of a group type; "" when the broker did not say."""
    return TYPE_NAMES.get(getattr(kind, "name", str(kind)), "")


def parse_filter(text: str | None, names: Mapping[str, str], what: str) -> set[str]:
    """A --state/--type value (comma-separated, any case) as lower-case names; {} for all."""
    if not text:
        return set()
    valid = {name.lower() for name in names.values() if name != "Unknown"}
    wanted = {item.strip().lower() for item in text.split(",")}
    if not wanted <= valid:
        shown = ", ".join(name for name in names.values() if name != "Unknown")
        raise UsageError(f"Invalid {what} list '{text}'. Valid {what}s are: {shown}")
    return wanted


@dataclass
class Group:
    """A described group: its description, or the error that kept it from us."""

    name: str
    description: Any
    error: str | None = None
    state: Any = None

    def __post_init__(self) -> None:
        if self.description is not None:
            self.state = self.description.state

    @property
    def type(self) -> Any:
        return getattr(self.description, "type", None)

    @property
    def members(self) -> list[Any]:
        return list(getattr(self.description, "members", None) or [])


class OffsetReader(Protocol):
    def committed(self, group: str) -> dict[Tp, int]: ...

    def log_end_offsets(self, partitions: Iterable[Tp]) -> Offsets: ...


def _table(widths: Sequence[int], rows: Iterable[Sequence[object]]) -> None:
    """Kafka's printf("%-Ns ...") rows, trailing blanks dropped."""
    for row in rows:
        cells = [f"{cell!s:<{w}}" for cell, w in zip(row, widths, strict=False)]
        cells += [str(cell) for cell in row[len(widths) :]]
        print(" ".join(cells).rstrip())


def _show(group: Group, rows: int) -> bool:
    """Kafka's shouldPrintMemberState: say why a group has no table; True if it has one."""
    if group.error is not None:
        print(f"Error: cannot describe group '{group.name}': {group.error}", file=sys.stderr)
        return False
    state = state_name(group.state)
    if state == "Dead":
        print(f"Error: Consumer group '{group.name}' does not exist.", file=sys.stderr)
        return False
    if state == "Empty":
        print(f"\nConsumer group '{group.name}' has no active members.", file=sys.stderr)
    elif state in _REBALANCING:
        print(f"\nWarning: Consumer group '{group.name}' is rebalancing.", file=sys.stderr)
    return rows > 0


def _failed(groups: Iterable[Group]) -> int:
    return int(any(g.error is not None or state_name(g.state) == "Dead" for g in groups))


def print_listing(rows: list[tuple[str, str, str]], with_type: bool, with_state: bool) -> None:
    width = max([15, *(len(group) for group, _, _ in rows)]) + 10
    widths = [width] + [20] * (with_type + with_state)
    picked = [(g, *([k] if with_type else []), *([s] if with_state else [])) for g, k, s in rows]
    header = ("GROUP", *(["TYPE"] if with_type else []), *(["STATE"] if with_state else []))
    _table(widths, [header, *picked])


def _value(offset: int | str | None) -> str:
    return MISSING if offset is None or isinstance(offset, str) else str(offset)


def _offset_rows(group: Group, reader: OffsetReader) -> list[list[str]]:
    committed = reader.committed(group.name)
    members = [m for m in group.members if m.assignment.topic_partitions]
    members.sort(key=lambda m: -len(m.assignment.topic_partitions))
    owners: list[tuple[list[Tp], Any]] = []
    assigned: set[Tp] = set()
    for member in members:
        tps = sorted((tp.topic, tp.partition) for tp in member.assignment.topic_partitions)
        owners.append((tps, member))
        assigned.update(tps)
    unowned = sorted(set(committed) - assigned)
    if unowned:
        owners.append((unowned, None))
    ends = reader.log_end_offsets([tp for tps, _ in owners for tp in tps])
    rows = []
    for tps, member in owners:
        who = [MISSING] * 3
        if member is not None:
            who = [member.member_id, member.host or MISSING, member.client_id or MISSING]
        for tp in tps:
            current, end = committed.get(tp), ends.get(tp)
            lag = end - current if isinstance(end, int) and current is not None else None
            row = [group.name, tp[0], str(tp[1]), _value(current), _value(end), _value(lag)]
            rows.append(row + who)
    return rows


def print_offsets(groups: list[Group], reader: OffsetReader) -> int:
    status = _failed(groups)
    for group in groups:
        try:
            gone = group.error is not None or state_name(group.state) == "Dead"
            rows = [] if gone else _offset_rows(group, reader)
        except CliError as exc:
            print(f"Error: {exc}", file=sys.stderr)
            status = 1
            continue
        if not _show(group, len(rows)):
            continue
        width = [max([15, *(len(r[i]) for r in rows)]) for i in (0, 1, 6, 7)]
        header = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG"]
        header += ["CONSUMER-ID", "HOST", "CLIENT-ID"]
        print()
        _table([width[0], width[1], 10, 15, 15, 15, width[2], width[3]], [header, *rows])
    return status


def _assignment(member: Any) -> str:
    by_topic: dict[str, list[int]] = {}
    for tp in member.assignment.topic_partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    shown = [f"{t}({','.join(map(str, sorted(ps)))})" for t, ps in sorted(by_topic.items())]
    return ", ".join(shown) or MISSING


def print_members(groups: list[Group], verbose: bool) -> int:
    for group in groups:
        if not _show(group, len(group.members)):
            continue
        with_instance = any(m.group_instance_id for m in group.members)
        rows = []
        for m in group.members:
            row = [group.name, m.member_id, *([m.group_instance_id or ""] if with_instance else [])]
            row += [m.host or MISSING, m.client_id or MISSING]
            row += [str(len(m.assignment.topic_partitions))]
            rows.append(row + ([_assignment(m)] if verbose else []))
        header = ["GROUP", "CONSUMER-ID", *(["GROUP-INSTANCE-ID"] if with_instance else [])]
        header += ["HOST", "CLIENT-ID", "#PARTITIONS", *(["ASSIGNMENT"] if verbose else [])]
        minimum = [15, 15, *([17] if with_instance else []), 15, 15]
        widths = [max([w, *(len(r[i]) for r in rows)]) for i, w in enumerate(minimum)] + [15]
        print()
        _table(widths, [header, *rows])
    return _failed(groups)


def print_states(groups: list[Group]) -> int:
    for group in groups:
        if not _show(group, 1):
            continue
        node = group.description.coordinator
        coordinator = f"{node.host}:{node.port}  ({node.id})"
        width = max(25, len(coordinator))
        strategy = group.description.partition_assignor or MISSING
        row = [group.name, coordinator, strategy, state_name(group.state), len(group.members)]
        header = ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]
        print()
        _table([width, 25, 20, 15], [header, row])
    return _failed(groups)


def print_reset_plan(plans: Mapping[str, Mapping[Tp, int]]) -> None:
    rows = [
        [group, topic, partition, offset]
        for group, plan in sorted(plans.items())
        for (topic, partition), offset in sorted(plan.items())
    ]
    if rows:
        print()
        _table([30, 30, 10, 15], [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], *rows])
