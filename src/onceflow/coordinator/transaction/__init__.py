"""The transaction coordinator, and the producer ids every idempotent producer needs."""
