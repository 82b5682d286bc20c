"""Process plumbing, the bottom floor every fedsched process stands on; imports nothing of fedsched.

Called by the hosts and the composition roots. ``backoff`` (capped, jittered), ``outage`` (riding out a
dependency that is away, and saying so on ``/healthz``), ``startup`` (a service's first connections,
waiting out an outage instead of exiting), ``tasks`` (stopping asyncio tasks for certain;
``Supervised``: a component started again with backoff when it ends early, and reported down meanwhile),
``signals`` (SIGINT/SIGTERM to a stop event), ``logs`` (structured logging), ``collector`` (the garbage
collector's settings for long-running services), ``health`` (dependency probes) and ``metrics`` (the
``/healthz`` and ``/metrics`` endpoint)."""
