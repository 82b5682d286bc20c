"""What we decide and serve, over the projections and the connectors.

From the top down (import-linter contracts keep the order): ``cli`` (every ``fedsched`` command) and
``bench`` (the services' benchmarks); ``runtime`` (the composition: ``fedsched up``, the supervisor, the
demo); then the services, which know nothing of each other except that audit replays the scheduler's
core: ``scheduler``, ``api``, ``audit``, ``governance``."""
