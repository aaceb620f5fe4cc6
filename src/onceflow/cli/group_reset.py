"""The offsets `onceflow groups --reset-offsets` would commit, computed as Kafka's
ConsumerGroupCommand computes them (prepareOffsetsToReset), from offsets asked of a source.

Pure apart from the `OffsetSource` it is given, so the arithmetic is tested without a broker:
--to-offset, --shift-by and --from-file are clamped into [log start, log end] with a warning;
--to-datetime and --by-duration take the first offset at or after the time, or the log end
when no record is that recent; --to-current keeps committed offsets and puts partitions
without one at the log end; --shift-by needs a committed offset on every partition.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import io
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from onceflow.cli.common import CliError

__all__ = [
    "SCENARIOS",
    "OffsetSource",
    "Scenario",
    "Tp",
    "export_csv",
    "parse_datetime",
    "parse_duration_ms",
    "parse_reset_csv",
    "parse_topic_arg",
    "plan_offsets",
]

Tp = tuple[str, int]
Warn = Callable[[str], None]

#: Each reset scenario's option (dest) as kafka-consumer-groups.sh names it.
SCENARIOS = (
    "to_earliest",
    "to_latest",
    "to_current",
    "to_offset",
    "shift_by",
    "to_datetime",
    "by_duration",
    "from_file",
)

_DURATION = re.compile(
    r"([-+]?)P(?:([-+]?\d+)D)?"
    r"(?:T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?",
    re.IGNORECASE,
)


class OffsetSource(Protocol):
    """Where the offsets come from: ListOffsets and OffsetFetch, in practice."""

    def earliest(self, partitions: Iterable[Tp]) -> dict[Tp, int]: ...

    def latest(self, partitions: Iterable[Tp]) -> dict[Tp, int]: ...

    def for_time(self, partitions: Iterable[Tp], timestamp_ms: int) -> dict[Tp, int]:
        """The first offset at or after the time; -1 where no record is that recent."""
        ...

    def committed(self, group: str) -> dict[Tp, int]: ...


@dataclass(frozen=True)
class Scenario:
    """One reset specification: `kind` is a SCENARIOS name; `value` its argument (an offset,
    a shift, a time in ms, a duration in ms); `plan` the --from-file offsets per group."""

    kind: str
    value: int = 0
    plan: Mapping[str, Mapping[Tp, int]] | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Scenario | None:
        """The one scenario given (argparse keeps them exclusive), or None."""
        for kind in SCENARIOS:
            given = getattr(args, kind, None)
            if given is None or given is False:
                continue
            if kind == "from_file":
                return cls(kind, plan=_read_plan(given, list(args.group)))
            return cls(kind, 0 if given is True else int(given))
        return None


def add_time_targets(to: argparse._MutuallyExclusiveGroup) -> None:
    """--to-datetime and --by-duration, the reset targets a time gives (consumer and share
    groups alike)."""
    to.add_argument(
        "--to-datetime",
        type=parse_datetime,
        metavar="YYYY-MM-DDTHH:mm:SS.sss",
        help="the first offset at or after this time (UTC unless it ends in Z or +hh:mm)",
    )
    to.add_argument(
        "--by-duration",
        type=parse_duration_ms,
        metavar="PnDTnHnMnS",
        help="the first offset at or after this long ago",
    )


def parse_datetime(text: str) -> int:
    """argparse type for --to-datetime: Kafka's 'YYYY-MM-DDTHH:mm:SS.sss' with an optional
    zone (Z, +hh:mm, +hhmm, +hh); without one it is UTC, as in Kafka. Milliseconds since
    the epoch."""
    date, sep, time = text.partition("T")
    if not sep or not date:
        raise argparse.ArgumentTypeError(
            f"expected YYYY-MM-DDTHH:mm:SS.sss[zone] (ISO 8601 with a 'T'), got {text!r}"
        )
    if not any(c in time for c in "+-Zz"):
        text += "+00:00"
    try:
        moment = datetime.datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected YYYY-MM-DDTHH:mm:SS.sss[zone], got {text!r}"
        ) from None
    return int(moment.timestamp() * 1000)


def parse_duration_ms(text: str) -> int:
    """argparse type for --by-duration: Java's Duration format PnDTnHnMn.nS, in ms."""
    match = _DURATION.fullmatch(text.strip())
    if match is None or not any(match.group(i) for i in (2, 3, 4, 5)):
        raise argparse.ArgumentTypeError(
            f"expected a duration such as PT1H or P1DT30M, got {text!r}"
        )
    sign, days, hours, minutes, seconds, fraction = match.groups()
    ms = int(days or 0) * 86_400_000 + int(hours or 0) * 3_600_000 + int(minutes or 0) * 60_000
    whole = int(seconds or 0)
    frac = int(((fraction or "") + "000")[:3])
    ms += whole * 1000 + (-frac if seconds and seconds.startswith("-") else frac)
    return -ms if sign == "-" else ms


def parse_topic_arg(text: str) -> tuple[str, list[int] | None]:
    """`topic` (all its partitions) or `topic:0,1,2`, as kafka-consumer-groups.sh's --topic."""
    topic, sep, partitions = text.partition(":")
    if not sep:
        return text, None
    try:
        numbers = [int(p) for p in partitions.split(",")]
    except ValueError:
        raise CliError(f"invalid partition in topic argument {text!r}") from None
    if not topic or any(p < 0 for p in numbers):
        raise CliError(f"invalid topic argument {text!r}, expected topic name and partitions")
    return topic, numbers


def _read_plan(path: str, groups: list[str]) -> dict[str, dict[Tp, int]]:
    try:
        with open(path, encoding="utf-8") as file:
            return parse_reset_csv(file.read(), groups)
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror or exc}") from None


def parse_reset_csv(text: str, groups: list[str]) -> dict[str, dict[Tp, int]]:
    """The offsets of a --from-file CSV, as --export writes it: `topic,partition,offset`
    when one --group is given, else `group,topic,partition,offset`."""
    plan: dict[str, dict[Tp, int]] = {}
    for number, row in enumerate(csv.reader(io.StringIO(text)), start=1):
        if not row or not "".join(row).strip():
            continue
        if len(groups) == 1 and len(row) == 3:
            row = [groups[0], *row]
        if len(row) != 4:
            raise CliError(
                f"line {number} of the reset plan: expected group,topic,partition,offset"
            )
        group, topic, partition, offset = (cell.strip() for cell in row)
        try:
            plan.setdefault(group, {})[(topic, int(partition))] = int(offset)
        except ValueError:
            raise CliError(
                f"line {number} of the reset plan: partition and offset must be numbers"
            ) from None
    return plan


def export_csv(plans: Mapping[str, Mapping[Tp, int]], single_group: bool) -> str:
    """The plan as --export prints it (the format --from-file reads)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for group, offsets in plans.items():
        for (topic, partition), offset in sorted(offsets.items()):
            row = [topic, partition, offset]
            writer.writerow(row if single_group else [group, *row])
    return out.getvalue()


def _clamped(requested: Mapping[Tp, int], source: OffsetSource, warn: Warn) -> dict[Tp, int]:
    """Kafka's checkOffsetsRange: into [log start, log end], saying so."""
    if not requested:
        return {}
    start, end = source.earliest(requested), source.latest(requested)
    out: dict[Tp, int] = {}
    for tp, offset in requested.items():
        name = f"{tp[0]}-{tp[1]}"
        if offset > end[tp]:
            warn(
                f"New offset ({offset}) is higher than latest offset for topic partition "
                f"{name}. Value will be set to {end[tp]}"
            )
            offset = end[tp]
        elif offset < start[tp]:
            warn(
                f"New offset ({offset}) is lower than earliest offset for topic partition "
                f"{name}. Value will be set to {start[tp]}"
            )
            offset = start[tp]
        out[tp] = offset
    return out


def _at_time(partitions: list[Tp], ms: int, source: OffsetSource, warn: Warn) -> dict[Tp, int]:
    found = source.for_time(partitions, ms)
    empty = [tp for tp in partitions if found[tp] < 0]
    for topic, partition in empty:
        warn(
            f"Partition {partition} from topic {topic} is empty. "
            "Falling back to latest known offset."
        )
    return {**found, **source.latest(empty)} if empty else found


def plan_offsets(
    scenario: Scenario,
    group: str,
    partitions: list[Tp],
    source: OffsetSource,
    warn: Warn,
    now_ms: int = 0,
) -> dict[Tp, int]:
    """The new offset of each partition of `group` (--from-file: of the partitions the file
    names for the group; `partitions` is ignored)."""
    kind = scenario.kind
    if kind == "from_file":
        offsets = (scenario.plan or {}).get(group)
        if offsets is None:
            warn(f"No reset plan for group {group} found")
            return {}
        return _clamped(offsets, source, warn)
    if kind == "to_offset":
        return _clamped(dict.fromkeys(partitions, scenario.value), source, warn)
    if kind == "to_earliest":
        return source.earliest(partitions)
    if kind == "to_latest":
        return source.latest(partitions)
    if kind == "to_datetime":
        return _at_time(partitions, scenario.value, source, warn)
    if kind == "by_duration":
        return _at_time(partitions, now_ms - scenario.value, source, warn)
    committed = source.committed(group)
    if kind == "shift_by":
        missing = [tp for tp in partitions if tp not in committed]
        if missing:
            topic, partition = missing[0]
            raise CliError(
                f"Cannot shift offset for partition {topic}-{partition} since there is no "
                "current committed offset"
            )
        return _clamped({tp: committed[tp] + scenario.value for tp in partitions}, source, warn)
    if kind == "to_current":
        without = [tp for tp in partitions if tp not in committed]
        ends = source.latest(without) if without else {}
        return {tp: committed[tp] if tp in committed else ends[tp] for tp in partitions}
    raise ValueError(f"unknown reset scenario {kind!r}")
