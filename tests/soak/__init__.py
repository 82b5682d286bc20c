"""The kill-anything soak (issue 19): the distributed mode's components as separate processes under
load and faults, then the invariants that must hold whatever was killed.

In the order a soak uses them: ``plan`` (what it does, from size and seed), ``backing`` (its own Kafka
and PostgreSQL), ``supervised`` and ``components`` (the processes, kept running), ``load`` (submissions
with request ids and client retries), ``chaos`` (the faults), ``settle`` (waiting for quiet), and the
judgement (``judge``): ``history`` (the log read back), ``invariants``, ``fencing``, ``replays``,
``archive_check`` and ``cost``, into ``figures``. ``run`` is the recipe; ``test_soak`` runs it and
``test_judgements`` shows each judgement failing on a history that breaks it.
"""
