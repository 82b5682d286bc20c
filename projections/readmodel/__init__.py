"""The PostgreSQL read models the API, the CLI, governance's report and the demo read: the tables and
rows (``rows``, pure), the writer the projection hosts commit through (``writer``) and the one typed
reader every caller asks (``reader``)."""
