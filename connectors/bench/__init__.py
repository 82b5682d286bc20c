"""The connectors' benchmarks: ``sim`` (how fast a simulated cluster publishes, ``fedsched connector
sim-bench``) and ``kubernetes`` (how fast the connector turns Node objects into inventory events, against a
real API server); outside the production import graph."""
