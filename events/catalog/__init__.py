"""The event catalogue: every event type fedsched reads or writes, as frozen pydantic models.

Importing this package registers every type (``REGISTRY``). Pure: imports no I/O library.
"""

from events.catalog import jobs
from events.catalog.base import Event
from events.catalog.registry import REGISTRY

__all__ = ["REGISTRY", "Event", "jobs"]
