"""The offsetstore server: storage core (``storage``), gRPC service (``app``), configuration and CLI."""
