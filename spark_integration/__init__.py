"""Exactly-once Spark Structured Streaming sink over the offset store (see issue: Spark integration)."""
