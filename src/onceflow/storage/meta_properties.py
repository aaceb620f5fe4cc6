"""Kafka's `meta.properties`: the cluster a data dir belongs to, written once and kept."""

from __future__ import annotations

import os

from onceflow.storage.fs import FileSystem

META_PROPERTIES = "meta.properties"


def read_cluster_id(fs: FileSystem, log_dir: str) -> str | None:
    """The cluster id the data dir was made for, None for a new data dir."""
    path = os.path.join(log_dir, META_PROPERTIES)
    if fs.exists(path):
        for line in fs.read_file(path).decode().splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "cluster.id":
                return value.strip()
    return None


def write_meta_properties(fs: FileSystem, log_dir: str, cluster_id: str, node_id: int) -> None:
    path = os.path.join(log_dir, META_PROPERTIES)
    body = f"version=1\ncluster.id={cluster_id}\nnode.id={node_id}\n"
    fs.write_file_atomic(path, body.encode())
