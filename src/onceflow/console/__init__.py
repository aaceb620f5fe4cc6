"""`onceflow console`: a web console for a Kafka cluster's transactions, LSO lag, hanging
transactions, consumer groups and records.

It is a Kafka client only (confluent-kafka for Metadata, ListOffsets, groups and records;
Onceflow's own client, `onceflow.client`, for the KIP-664 transaction APIs), so it shows an
Apache Kafka cluster the same way as Onceflow, secured or not (`--command-config`). `app`
serves the static page and its JSON endpoints; each `*_view` module turns Kafka answers
into plain JSON values, in a worker thread. It imports nothing of the CLI.
"""
