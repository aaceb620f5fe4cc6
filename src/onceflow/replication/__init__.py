"""Replication: a partition's replicas as leader or follower (ISR, high watermark, leader
epochs) and the fetchers that copy a leader's log to its followers."""
