"""The projection stages, pure: each a reducer ``(entity, input) -> (entity, emitted)`` over entities
under string keys, wired into one topology.

Called by both projection hosts. ``core`` (the stage contract), ``deltas`` (what stages tell each other),
``jobs``, ``nodes``, ``clusters``, ``quota``, ``usage``, ``fleet``, ``shapes`` (the stages), ``persistent``
(persistent collections for their entities), ``topology`` (how one event flows through them),
``sources`` (what they read, and the order of one moment's records) and ``codec`` (how the hosts store
entities and send stage inputs; ``codec_types`` and ``codec_errors`` beside it)."""
