"""The in-process projection host (embedded mode, ``fedsched projections rebuild``): ``follower`` (every
source partition merged in event-time order) and ``runner`` (the host: fold, publish, write)."""
