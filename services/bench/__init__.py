"""The services' benchmarks, outside the production import graph (``fedsched bench`` loads them by name):
``scheduler`` (placements per second), ``verify`` (``audit verify``'s replay rate) and ``e2e`` (gRPC
submit to ``JobPlaced`` on real Kafka)."""
