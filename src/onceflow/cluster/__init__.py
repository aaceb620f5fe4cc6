"""The cluster's shared metadata (brokers, controller, topics, partition state, producer-id
blocks) in ZooKeeper, Kafka's ZooKeeper-era layout. A broker without zookeeper.connect runs
alone and never imports kazoo's connection."""
