"""The demo that `make run` runs: an exactly-once payments pipeline on PySpark, a crash in
the middle, and read_committed checks that nothing was lost, duplicated or leaked."""
