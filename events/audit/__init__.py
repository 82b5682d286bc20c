"""The audit archive: every record of the log copied into an append-only, hash-chained PostgreSQL table,
its heads signed in checkpoints kept outside the database.

Pure: ``chain`` (the hashes, and the verifier that names a partition's first bad position against the
heads history and the signed heads), ``merkle`` (RFC 6962 trees over a partition's record hashes),
``checkpoint`` (a checkpoint's bytes, Ed25519 signature and series), ``proof`` (one record's inclusion
proof) and ``redact`` (credentials kept out of the archive). With I/O: ``archive`` (the tables, their
sink and the archiver host: ``fedsched audit archive``, inside ``fedsched up``; ``verify_chain`` and
``inclusion_proof``), ``checkpointer`` (the archiver's signer), ``checkpoint_files`` (the checkpoint
directory and key files) and ``reader`` (the archive's typed reads, for ``fedsched audit timeline`` and
``export``)."""
