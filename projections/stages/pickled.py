"""How stage entities and deltas are pickled: for the projection hosts' own stores only.

Called by the read-model writer (entity states in ``projection_state``) and the faust host (its
changelogs and the packs on its internal topics). Pure: no I/O. Whatever this writes is read only by this
code from stores only this code writes; public events keep the CloudEvents binding.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Callable
from dataclasses import fields, is_dataclass
from operator import attrgetter
from typing import Any


def dumps(value: object) -> bytes:
    """``pickle.dumps`` (protocol 5), with slotted dataclasses (our deltas, entities and their parts)
    pickled as a call of their constructor with their field values: the standard
    ``__getstate__``/``__setstate__`` of such a dataclass looks its fields up on every call, which
    made pickling the largest cost of a pack. ``pickle.loads`` reads either."""
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=5).dump(value)
    return buffer.getvalue()


_GETTERS: dict[type, Callable[[Any], tuple[object, ...]] | None] = {}


def _getter(cls: type) -> Callable[[Any], tuple[object, ...]] | None:
    """How to read the constructor's arguments of a slotted dataclass whose generated ``__init__`` sets
    every field and nothing else (None: another type, pickled as usual)."""
    getstate = getattr(cls, "__getstate__", None)
    init = getattr(cls, "__init__", None)
    if not (
        is_dataclass(cls)
        and getattr(getstate, "__qualname__", "") in ("_dataclass_getstate", "_record_getstate")
        and getattr(getattr(init, "__code__", None), "co_filename", "") == "<string>"  # generated
        and not hasattr(cls, "__post_init__")
    ):
        return None
    every = fields(cls)
    code = init.__code__  # type: ignore[union-attr]
    if not all(f.init for f in every) or code.co_kwonlyargcount or code.co_argcount != len(every) + 1:
        return None  # keyword-only fields, or init-only variables: not a call by position
    names = [f.name for f in every]
    if not names:
        return lambda obj: ()
    read = attrgetter(*names)
    return (lambda obj: (read(obj),)) if len(names) == 1 else read


class _Pickler(pickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        cls = type(obj)
        try:
            getter = _GETTERS[cls]
        except KeyError:
            getter = _GETTERS[cls] = _getter(cls)
        if getter is None:
            return NotImplemented
        return cls, getter(obj)


__all__ = ["dumps"]
