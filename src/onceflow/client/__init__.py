"""Onceflow's own Kafka protocol client: one sans-IO core, two drivers.

`core.ConnectionCore` holds one connection's protocol state (correlation ids, framing,
the response size bound, negotiated versions, the KIP-368 re-authentication deadline);
`blocking.Connection` (sockets, TLS) and `aio.AsyncConnection` (asyncio) only move its
bytes. `cluster.Cluster` routes blocking requests to leaders and coordinators;
`txn_admin` and `security_admin` are the admin calls confluent-kafka lacks or mishandles;
`properties` and `librdkafka` read client properties files for either kind of client.
Failures are `errors.ClientError`s. The CLI, the console, the demo, replica fetchers and
inter-broker requests all use it; it imports nothing of theirs.
"""
