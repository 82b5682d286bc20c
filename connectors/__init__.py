"""How we talk to clusters: one package per kind (``sim``, ``kubernetes``), each of one shape (observe the
cluster, publish events, carry out decisions, restart-safe from the log); they import only ``events``.
``bench`` holds their benchmarks."""
