"""The option kinds kafka-console-producer.sh and kafka-console-consumer.sh share.

`--property` is the tool's own setting (the line reader's, the formatter's); a key the tool
does not know stays what `--property` meant in Onceflow before, a client setting, as
`--producer-property` / `--consumer-property` give. Kafka's named client options
(`--compression-codec`, `--request-timeout-ms`) are client settings too, and the older
aliases (`--print-key`, `--key-separator`) set the tool properties they stand for, so every
form lands in the same two places: `args.tool_properties` and `args.property`.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from onceflow.cli.common import key_value

__all__ = ["add_client_setting", "add_property_options", "add_tool_alias"]

SUPPRESS = argparse.SUPPRESS


def _set_tool(namespace: argparse.Namespace, key: str, value: str) -> None:
    properties = dict(getattr(namespace, "tool_properties", None) or {})
    properties[key] = value
    namespace.tool_properties = properties


def _add_client(namespace: argparse.Namespace, key: str, value: str) -> None:
    namespace.property = [*(getattr(namespace, "property", None) or []), (key, value)]


class _Property(argparse.Action):
    def __init__(self, *args: Any, tool_keys: frozenset[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tool_keys = tool_keys

    def __call__(
        self, parser: Any, namespace: argparse.Namespace, values: Any, option: Any = None
    ) -> None:
        key, value = values
        if key in self.tool_keys:
            _set_tool(namespace, key, value)
        else:
            _add_client(namespace, key, value)


class _ClientSetting(argparse.Action):
    def __init__(self, *args: Any, setting: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.setting = setting

    def __call__(
        self, parser: Any, namespace: argparse.Namespace, values: Any, option: Any = None
    ) -> None:
        _add_client(namespace, self.setting, str(values))


class _ToolAlias(argparse.Action):
    def __init__(self, *args: Any, sets: Sequence[tuple[str, str | None]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sets = sets

    def __call__(
        self, parser: Any, namespace: argparse.Namespace, values: Any, option: Any = None
    ) -> None:
        for key, fixed in self.sets:
            _set_tool(namespace, key, str(values) if fixed is None else fixed)


def add_property_options(
    parser: argparse.ArgumentParser, tool_keys: frozenset[str], client: str, what: str
) -> None:
    """`--property` (the tool's keys, else a client setting) and `--<client>-property`."""
    parser.add_argument(
        "--property",
        dest="tool_properties",
        default={},
        action=_Property,
        tool_keys=tool_keys,
        type=key_value,
        metavar="KEY=VALUE",
        help=f"{what}: {', '.join(sorted(tool_keys))} (any other key is a {client} "
        "setting, as with the next option); repeatable",
    )
    parser.add_argument(
        f"--{client}-property",
        dest="property",
        type=key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"{client} (librdkafka) setting such as client.id=me; repeatable",
    )


def add_client_setting(
    parser: argparse.ArgumentParser, option: str, setting: str, help: str, **kwargs: Any
) -> None:
    """A Kafka option that is a client setting under another name (shown in the help)."""
    parser.add_argument(
        option,
        dest="property",
        default=[],
        action=_ClientSetting,
        setting=setting,
        help=f"{help} ({setting})",
        **kwargs,
    )


def add_tool_alias(
    parser: argparse.ArgumentParser, option: str, sets: Sequence[tuple[str, str | None]]
) -> None:
    """An older Onceflow option standing for tool properties (None: the option's value);
    left out of the help, which leads with Kafka's form."""
    takes_value = any(fixed is None for _, fixed in sets)
    parser.add_argument(
        option,
        dest="tool_properties",
        default={},
        action=_ToolAlias,
        sets=sets,
        nargs=None if takes_value else 0,
        help=SUPPRESS,
    )
