"""kafka-configs.sh's SCRAM credential syntax, for `onceflow users --alter`.

`--add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[...]'`:
commas outside square brackets separate the configs, the brackets only group a value that
has commas and are then dropped, and a credential is `[iterations=N,]password=P` (the
password is the rest, commas and all). Pure functions; `users` talks to the cluster.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from onceflow.cli.common import UsageError
from onceflow.security.scram import MIN_ITERATIONS, SCRAM_MECHANISMS

__all__ = [
    "DEFAULT_ITERATIONS",
    "MECHANISMS",
    "MIN_ITERATIONS",
    "ScramUpsertion",
    "mechanism",
    "parse_add_config",
    "parse_delete_config",
    "scram_credential",
]

MECHANISMS = tuple(SCRAM_MECHANISMS)
DEFAULT_ITERATIONS = 4096  # kafka-configs.sh's default
# A comma, or an `=`, that is not inside [...]: no `]` follows before the next `[` or the end.
_OUTSIDE_BRACKETS = r"(?=[^\]]*(?:\[|$))"
_CREDENTIAL = re.compile(r"(?:iterations=(-?[0-9]*),)?password=(.*)", re.S)
_KEY = re.compile(r"[a-zA-Z0-9._-]*")


@dataclass(frozen=True, slots=True)
class ScramUpsertion:
    mechanism: str
    iterations: int
    password: bytes = field(repr=False)  # never in a traceback or a log line


def mechanism(text: str) -> str:
    """A SCRAM mechanism by Kafka's name (SCRAM-SHA-256, SCRAM-SHA-512), any case."""
    name = text.strip().upper()
    if name not in MECHANISMS:
        raise UsageError(f"unknown SCRAM mechanism {text!r} (valid: {', '.join(MECHANISMS)})")
    return name


def parse_add_config(text: str) -> dict[str, str]:
    """`k1=v1,k2=[v2,with,commas]` as kafka-configs.sh reads it."""
    configs: dict[str, str] = {}
    for item in re.split("," + _OUTSIDE_BRACKETS, text):
        pair = re.split(r"\s*=\s*" + _OUTSIDE_BRACKETS, item)
        if len(pair) != 2:
            raise UsageError(
                'every config to add must be "key=val", or "key=[val1,val2]" to group values '
                "that contain commas"
            )
        key = pair[0].strip()
        if not _KEY.fullmatch(key):
            raise UsageError(f"invalid character in config key {key!r}")
        configs[key] = re.sub(r"[\[\]]", "", pair[1]).strip()
    return configs


def parse_delete_config(values: list[str]) -> list[str]:
    """The `--delete-config` names: repeatable and comma-separated, as in kafka-configs.sh."""
    return [name.strip() for value in values for name in value.split(",") if name.strip()]


def scram_credential(name: str, value: str) -> ScramUpsertion:
    """One `SCRAM-SHA-256=iterations=8192,password=secret` config as a credential to set."""
    found = _CREDENTIAL.fullmatch(value)
    if found is None:
        # The value holds the password: never echo it.
        raise UsageError(f"invalid credential for {name}: expected [iterations=N,]password=P")
    iterations = DEFAULT_ITERATIONS
    if found[1] not in (None, "", "-1"):
        iterations = int(found[1])
    if iterations < MIN_ITERATIONS:
        raise UsageError(
            f"iterations {iterations} is less than the minimum {MIN_ITERATIONS} for {name}"
        )
    if not found[2]:
        raise UsageError(f"the password for {name} is empty")
    return ScramUpsertion(mechanism(name), iterations, found[2].encode())
