"""The distributed projection host on faust-streaming: the same stages as the in-process host, as agents.

``app`` (the host: router, stage agents, tables), ``adapters`` (every faust subclass and use of faust's
private names, in one place), ``config`` (settings and topic names), ``router``, ``align``, ``source``,
``progress`` (source records in, causes first), ``wire`` (what travels between stages), ``fold`` (a stage's
batch) and ``sink`` (its read-model writes)."""
