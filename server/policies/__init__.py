"""The gate's own policies, a module each; :data:`offsetstore.server.gate.ORDER` says in which order they run.

:mod:`.log` (a line per call), :mod:`.access` (authentication, then the grants: the method's
before the body is read, the request's after), :mod:`.admission` (calls and bytes counted
in; the principal's cost share), :mod:`.read` (the request, counted on the wire, decoded),
:mod:`.deadline` (the caller's deadline and its actor). The quotas, the scan cost, the
metrics and the traces are policies of their own modules (:mod:`offsetstore.server.quota`,
:mod:`~offsetstore.server.partition_quota`, :mod:`~offsetstore.server.scan_cost`,
:mod:`offsetstore.server.metrics.rpc`, :mod:`offsetstore.server._otel`).
"""
