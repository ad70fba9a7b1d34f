"""The sinks' core: one batch write of rows and offsets in one transaction, its SQL, and Arrow into COPY."""
