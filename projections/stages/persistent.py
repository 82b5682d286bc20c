"""Persistent collections for the stages' entities: a map and a capped set of runs whose every version
stays valid, while the newest is changed in O(1) (the map) or O(log n) (the set) instead of copied.

Called by ``projections.stages.quota`` and ``projections.stages.fleet``. Pure; no I/O.

An entity is a value: a host keeps older versions (the faust table holds the version before a batch
until the batch's changelog is written; a batch host publishes against the version before it; a test
folds twice from one entity), and each must keep saying what it said. Copying a container on every
change keeps that, at the cost of the container's size per input. Here the versions of one container
share a single mutable state (Baker's "rerooting" of persistent arrays): the newest version holds it,
and each older one holds the change that turns its successor's state back into its own. A change of
the newest version changes the state in place and makes the old version such a difference, in O(1).
Reading an older version first walks the differences back to it (the newest one then becomes the
difference), so any version can be read, changed, compared or pickled, and a host that only ever goes
forward (every host does: it folds the entity it stored last) never pays for it; reading a version k
changes back costs O(k) steps (each O(1), or O(log n) for the run set). Versions nobody
refers to any longer are collected with their differences.

Not thread-safe (nor are the hosts' folds shared between threads). Equal by content; pickled as their
content (a plain dict or tuple), so a pickle never refers to the shared state.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from heapq import heapify, heappop, heappush
from typing import Any, Generic, TypeVar, overload

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
R = TypeVar("R")

_MISSING: Any = object()

Change = tuple[Callable[..., Any], tuple[Any, ...]]
"""A change of a state: ``function(state, *arguments)`` makes it and returns the change undoing it."""


class _Versions:
    """One version of a shared mutable state: the newest (``_state`` is the state) or an older one
    (``_state`` is None; ``_back`` changes the state of ``_next``, a newer version, into this one's)."""

    __slots__ = ("_back", "_next", "_state")

    _state: Any
    _back: Change | None
    _next: _Versions | None

    def _here(self) -> Any:
        """The state, as of this version."""
        state = self._state
        return self._reroot() if state is None else state

    def _reroot(self) -> Any:
        path = []
        node: _Versions = self
        while node._state is None:
            path.append(node)
            assert node._next is not None
            node = node._next
        state = node._state
        for older in reversed(path):  # each one's ``_next`` is the newest version by now
            newer = older._next
            assert newer is not None and older._back is not None
            undo, arguments = older._back
            redo = undo(state, *arguments)
            newer._state, newer._back, newer._next = None, redo, older
            older._state, older._back, older._next = state, None, None
        return state

    def _changed(self, state: Any, undo: Change) -> Any:
        """A new version whose state is ``state`` (this version's, just changed in place by a change
        that ``undo`` reverts); this version becomes a difference from it."""
        new = object.__new__(type(self))
        new._state, new._back, new._next = state, None, None
        self._state, self._back, self._next = None, undo, new
        return new


def _put(state: dict[Any, Any], key: Any, value: Any) -> Change:
    old = state.get(key, _MISSING)
    if value is _MISSING:
        del state[key]
    else:
        state[key] = value
    return _put, (key, old)


class PMap(_Versions, Generic[K, V]):
    """A persistent dict: ``set`` and ``remove`` return a new version in O(1); this one is unchanged."""

    __slots__ = ()

    def __init__(self, items: Mapping[K, V] | Iterable[tuple[K, V]] = ()) -> None:
        self._state, self._back, self._next = dict(items), None, None

    @overload
    def get(self, key: K) -> V | None: ...
    @overload
    def get(self, key: K, default: R) -> V | R: ...
    def get(self, key: K, default: object = None) -> object:
        return self._here().get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._here()

    def __len__(self) -> int:
        return len(self._here())

    def __iter__(self) -> Iterator[K]:
        return iter(list(self._here()))

    def set(self, key: K, value: V) -> PMap[K, V]:
        state = self._here()
        return self._changed(state, _put(state, key, value))  # type: ignore[no-any-return]

    def remove(self, key: K) -> PMap[K, V]:
        """Without ``key`` (this very version when it has none)."""
        state = self._here()
        if key not in state:
            return self
        return self._changed(state, _put(state, key, _MISSING))  # type: ignore[no-any-return]

    def to_dict(self) -> dict[K, V]:
        """A copy of this version's content."""
        return dict(self._here())

    def items(self) -> list[tuple[K, V]]:
        return list(self._here().items())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PMap):
            return NotImplemented
        return self is other or self.to_dict() == other.to_dict()  # a copy: both may share one state

    def __hash__(self) -> int:
        return hash(frozenset(self._here().items()))

    def __reduce__(self) -> tuple[Any, ...]:
        return PMap, (self.to_dict(),)  # a copy: a pickle made later must not see later versions

    def __repr__(self) -> str:
        return f"PMap({self._here()!r})"


class _Runs:
    __slots__ = ("cap", "heap", "members")

    def __init__(self, runs: Iterable[Any], cap: int) -> None:
        self.members = set(runs)
        self.heap = list(self.members)
        heapify(self.heap)
        self.cap = cap


def _add(state: _Runs, run: Any) -> Change:
    """Add ``run`` (absent, and greater than the smallest run of a full set: the caller checks) and drop
    the smallest run when the set is over its cap. The heap holds every run of the set, and may hold
    runs an undo took out (skipped when they come to its top)."""
    members, heap = state.members, state.heap
    members.add(run)
    heappush(heap, run)
    if len(members) <= state.cap:
        return _take, (run, _MISSING)
    dropped = heappop(heap)
    while dropped not in members:
        dropped = heappop(heap)
    members.discard(dropped)
    return _take, (run, dropped)


def _take(state: _Runs, run: Any, dropped: Any) -> Change:
    """Undo an ``_add`` (done only to read an older version): ``run`` stays in the heap until it
    comes to its top, or until the heap is rebuilt from the runs when it holds twice as many."""
    members, heap = state.members, state.heap
    members.discard(run)
    if dropped is not _MISSING:
        members.add(dropped)
        heappush(heap, dropped)
    if len(heap) > 2 * len(members) + 16:
        state.heap = list(members)
        heapify(state.heap)
    return _add, (run,)


def _smallest(state: _Runs) -> Any:
    heap, members = state.heap, state.members
    while heap[0] not in members:
        heappop(heap)
    return heap[0]


class RunSet(_Versions):
    """A persistent set of at most ``cap`` runs (comparable values) that keeps the greatest ones: adding
    to a full set drops its smallest run (or the new one, when that is smaller than all). ``add``
    returns a new version in O(log n); this one is unchanged."""

    __slots__ = ()

    def __init__(self, runs: Iterable[Any] = (), cap: int = 10_000) -> None:
        if cap < 1:
            raise ValueError(f"a run set keeps at least one run, not {cap}")
        state = _Runs(runs, cap)
        if len(state.heap) > cap:
            state = _Runs(sorted(state.members)[-cap:], cap)
        self._state, self._back, self._next = state, None, None

    @property
    def cap(self) -> int:
        return self._here().cap  # type: ignore[no-any-return]

    def __contains__(self, run: object) -> bool:
        return run in self._here().members

    def __len__(self) -> int:
        return len(self._here().members)

    def add(self, run: Any) -> RunSet:
        """With ``run`` (this very version when it has it, or when it would drop it at once)."""
        state: _Runs = self._here()
        if run in state.members or (len(state.members) >= state.cap and run < _smallest(state)):
            return self
        return self._changed(state, _add(state, run))  # type: ignore[no-any-return]

    def sorted(self) -> tuple[Any, ...]:
        return tuple(sorted(self._here().members))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RunSet):
            return NotImplemented
        if self is other:
            return True
        mine: _Runs = self._here()
        cap, members = mine.cap, set(mine.members)  # a copy: both may share one state
        theirs: _Runs = other._here()
        return cap == theirs.cap and members == theirs.members

    def __hash__(self) -> int:
        state: _Runs = self._here()
        return hash((state.cap, frozenset(state.members)))

    def __reduce__(self) -> tuple[Any, ...]:
        state: _Runs = self._here()
        return RunSet, (tuple(state.members), state.cap)

    def __repr__(self) -> str:
        state: _Runs = self._here()
        return f"RunSet({self.sorted()!r}, cap={state.cap})"
