"""The gRPC API (``fedsched.v1``) and the event intake for MLOps tools.

Composition root: ``services.api.server.serve``. Module map: ``proto/`` (the contract; stubs generated
by ``codegen`` into ``gen/``, imported through ``pb``), ``auth`` (JWT interceptor and claim checks),
``errors`` (the one mapping to status codes), ``validation`` (edge checks with the catalogue's models),
``commands`` (the write side shared with ``intake``), ``quota_rules`` (the port governance fills for
quota commands), ``store`` (idempotency keys), ``convert`` and ``explain`` (the read models' rows, from
``projections.readmodel.reader``, to messages), ``handlers`` (generic method wrappers), one
module per service (``jobs``, ``resources``, ``quota``, ``audit``), ``watch`` (WatchJob) and ``client``
(the Python client the CLI uses).
"""
