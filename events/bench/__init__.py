"""``fedsched bench log``: the log adapters against bare aiokafka (outside the production import graph;
the CLI loads it by name)."""
