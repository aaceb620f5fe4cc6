"""The topology seam (base) and its two implementations: a cluster of one, and ZooKeeper."""
