"""The audit archive: every record of the log copied into an append-only, hash-chained PostgreSQL table.

``chain`` (pure: the hashes and their verification), ``archive`` (the table, its sink and the archiver
host: ``fedsched audit archive``, inside ``fedsched up``) and ``reader`` (the archive's typed reads, for
``fedsched audit timeline`` and ``export``)."""
