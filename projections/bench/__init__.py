"""``fedsched bench projections`` (``throughput``) and the faust worker processes that it and the tests
start and watch (``workers``); outside the production import graph."""
