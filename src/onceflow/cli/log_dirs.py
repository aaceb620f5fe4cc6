"""The log dirs of every broker, for `onceflow topics describe`: free space against the
free-space threshold, as DescribeLogDirs (v4: total and usable bytes) and DescribeConfigs
report them. Against Apache Kafka, which has no such threshold, only the space is shown.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import ConfigResource  # type: ignore[attr-defined]

from onceflow.client.cluster import Cluster
from onceflow.client.errors import ClientError
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey
from onceflow.security.client_config import ClientSecurity

MIN_FREE_BYTES = "onceflow.log.dir.min.free.bytes"
MIN_FREE_PERCENT = "onceflow.log.dir.min.free.percent"


def log_dir_lines(
    admin: Any, bootstrap: str, timeout_s: float, security: ClientSecurity | None = None
) -> list[str]:
    """One line per log dir of every broker; a line saying why when they cannot be had."""
    try:
        with Cluster(bootstrap, timeout_s, security) as cluster:
            lines = []
            for node in cluster.brokers():
                connection = cluster.node(node.node_id)
                if ApiKey.DESCRIBE_LOG_DIRS not in connection.versions:
                    continue
                response = connection.call(ApiKey.DESCRIBE_LOG_DIRS, topics=None)
                limits = _thresholds(admin, node.node_id, timeout_s)
                lines += [_render(node.node_id, r, limits) for r in response.results]
            return lines
    except (ClientError, OSError) as exc:
        return [f"LogDirs: (unavailable: {exc})"]


def _thresholds(admin: Any, node_id: int, timeout_s: float) -> tuple[int, float] | None:
    resource = ConfigResource("broker", str(node_id))
    try:
        entries = admin.describe_configs([resource], request_timeout=timeout_s)[resource].result()
        return int(entries[MIN_FREE_BYTES].value), float(entries[MIN_FREE_PERCENT].value)
    except (KafkaException, KeyError, TypeError, ValueError):
        return None  # not an Onceflow broker, or one that does not say


def _render(node_id: int, result: Any, limits: tuple[int, float] | None) -> str:
    total = int(getattr(result, "total_bytes", -1))
    usable = int(getattr(result, "usable_bytes", -1))
    line = f"LogDir: {result.log_dir}\tBroker: {node_id}"
    if result.error_code != ErrorCode.none:
        return f"{line}\tState: offline ({ErrorCode(result.error_code).name.upper()})"
    if total < 0 or usable < 0:
        return line  # DescribeLogDirs before v4 reports no space
    state = "full" if usable == 0 else "ok"
    shown = f"\tUsable: {_size(usable)}\tTotal: {_size(total)}"
    if limits is not None:
        threshold = int(min(limits[0], total * limits[1] / 100))
        if 0 < usable < threshold:
            state = "low (produce refused)"
        shown += f"\tThreshold: {_size(threshold)}"
    return f"{line}\tState: {state}{shown}"


def _size(n: int) -> str:
    value, unit = float(n), "B"
    for bigger in ("KiB", "MiB", "GiB"):
        if value < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
