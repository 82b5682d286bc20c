"""What we know now: the projections of the log into resource profiles, quota usage, job views,
utilisation and cost, and their read models.

From the top down (an import-linter contract keeps the order): ``bench`` (``fedsched bench
projections`` and the worker processes tests run), the two hosts ``faust`` (distributed, faust-streaming)
and ``inprocess`` (embedded), ``readmodel`` (the PostgreSQL tables, their writer and their typed reader)
and ``stages`` (the pure reducers and their topology, the same in both hosts)."""
