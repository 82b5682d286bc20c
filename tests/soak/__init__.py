"""The kill-anything soak (issue 19): the distributed mode's components as separate processes under
load and faults, then the invariants that must hold whatever was killed.

In the order a soak uses them: ``plan`` (what it does, from size and seed), ``backing`` (its own Kafka
and PostgreSQL), ``components`` (the processes, kept running), ``load`` (submissions with request ids
and client retries), ``chaos`` (the faults), ``settle`` (waiting for quiet), ``history`` (the log read
back), ``invariants``, ``fencing``, ``replays``, ``archive_check`` and ``cost`` (the judgements),
``figures``, and ``run`` (the recipe); ``test_soak`` runs it.
"""
