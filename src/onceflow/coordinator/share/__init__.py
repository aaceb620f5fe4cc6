"""Share groups (KIP-932): queue semantics on a topic. `state` is the in-flight records'
state table, `partition` one share-partition's state machine (sans-IO), `group` the
membership and assignment, `coordinator` the broker-facing whole."""
