"""The dispatch table: API key -> handler. Every key here is advertised by ApiVersions."""

from __future__ import annotations

from onceflow.broker.handlers import (
    acls,
    admin,
    client_quotas,
    cluster_info,
    complete_txns,
    configs,
    consumer_groups,
    elect_leaders,
    group,
    groups_admin,
    log_dirs,
    reassignments,
    records_admin,
    sasl,
    scram,
    share_fetch,
    share_groups,
    share_offsets,
    share_state,
    share_state_lifecycle,
    topic_partitions,
    txn,
    txn_admin,
    txn_share_ack,
)
from onceflow.broker.handlers.api_versions import handle_api_versions
from onceflow.broker.handlers.base import Handler
from onceflow.broker.handlers.fetch import handle_fetch
from onceflow.broker.handlers.leader_epoch import handle_offset_for_leader_epoch
from onceflow.broker.handlers.list_offsets import handle_list_offsets
from onceflow.broker.handlers.metadata import handle_metadata
from onceflow.broker.handlers.produce import handle_produce
from onceflow.protocol.api_versions import SUPPORTED_VERSIONS, ApiKey

HANDLERS: dict[int, Handler] = {
    ApiKey.API_VERSIONS: handle_api_versions,
    ApiKey.METADATA: handle_metadata,
    ApiKey.PRODUCE: handle_produce,
    ApiKey.FETCH: handle_fetch,
    ApiKey.LIST_OFFSETS: handle_list_offsets,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: handle_offset_for_leader_epoch,
    **admin.HANDLERS,
    **cluster_info.HANDLERS,
    **configs.HANDLERS,
    **log_dirs.HANDLERS,
    **elect_leaders.HANDLERS,
    **reassignments.HANDLERS,
    **group.HANDLERS,
    **consumer_groups.HANDLERS,
    **groups_admin.HANDLERS,
    **records_admin.HANDLERS,
    **topic_partitions.HANDLERS,
    **txn.HANDLERS,
    **txn_admin.HANDLERS,
    **complete_txns.HANDLERS,
    **sasl.HANDLERS,
    **acls.HANDLERS,
    **scram.HANDLERS,
    **client_quotas.HANDLERS,
    **share_groups.HANDLERS,
    **share_fetch.HANDLERS,
    **share_offsets.HANDLERS,
    **share_state.HANDLERS,
    **share_state_lifecycle.HANDLERS,
    **txn_share_ack.HANDLERS,
}

missing = set(SUPPORTED_VERSIONS) - set(HANDLERS)
if missing:  # an advertised API without a handler would be a lie to every client
    raise RuntimeError(f"advertised APIs without handlers: {sorted(missing)}")
