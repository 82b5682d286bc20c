"""The one shape of every host: a follower of the log, a step, a transactional sink, and the loop.

Called by every host: the scheduler, the projection runner, the audit archiver, governance, the API's
intake and the connectors; they differ in their step. ``follower`` (``Follower``: positions the host
keeps; ``GroupFollower``: positions a consumer group keeps), ``sink`` (``LogSink``: outputs and positions
in one transaction; the ``Sink`` shape the PostgreSQL sinks share), ``loop`` (``ride_out``: steps until
stopped, through outages), ``consumer`` (the per-event step of a consumer-group host: decode, hand on,
dead-letter) and ``lag`` (how far a follower is behind the log)."""
