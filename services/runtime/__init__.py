"""The composition of a whole fedsched: ``up`` (every component in one process on the embedded log),
``supervisor`` (each component as its own process, distributed), ``embedded_pg`` (the embedded PostgreSQL)
and ``demo`` (a real trace through the API, then ``audit verify``). Called by ``fedsched up`` and ``demo``."""
