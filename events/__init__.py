"""What happened and where it is kept: the bottom layer, which imports no other fedsched layer.

From the top down (an import-linter contract keeps the order): ``bench`` (``fedsched bench log``),
``audit`` (the hash-chained archive), ``hosting`` (the one shape of every host), ``log`` (the
``EventLog`` contract and its Kafka, PostgreSQL and in-memory implementations), ``wire`` (the CloudEvents
envelope and its Kafka binding), ``catalog`` (every event type, pure) and ``plumbing`` (process plumbing
every process stands on)."""
