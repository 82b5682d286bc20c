"""RFC 6962 Merkle trees over a partition's record hashes: roots, compact frontiers and inclusion proofs.

Called by the chain verifier (``events.audit.chain``: the root at each signed head), the archiver's sink
(``events.audit.archive``: the frontier kept in each head row, so a checkpoint's root costs no re-read),
checkpoints (``events.audit.checkpoint``) and inclusion proofs (``events.audit.proof``). Pure: hashlib only.

Hashing as RFC 6962 section 2.1 (and RFC 9162 section 2.1.1): a leaf is ``SHA-256(0x00 || data)``, an
inner node ``SHA-256(0x01 || left || right)``, the tree over ``n`` leaves splits at the largest power of
two below ``n``, and the empty tree's root is ``SHA-256()``. Here a leaf's data is a record's chain hash
(32 bytes), so a partition's root over its first ``n`` records commits to each of them and to their
order, and one record's inclusion is proved with ``log2(n)`` hashes instead of the whole chain.

A *frontier* is the roots of the perfect subtrees that make up a tree of ``n`` leaves, largest first
(one per set bit of ``n``): enough to append the next leaf and to compute the root, in ``O(log n)``
space, which is how a years-long partition is checkpointed without reading it again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

HASH_SIZE = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


class Frontier:
    """The perfect subtrees of a growing tree, largest first; ``append`` a leaf hash, ask the ``root``."""

    __slots__ = ("_nodes", "size")

    def __init__(self, size: int = 0, nodes: Sequence[bytes] = ()) -> None:
        if size < 0:
            raise ValueError(f"frontier size: {size} is negative")
        if len(nodes) != size.bit_count():
            raise ValueError(
                f"frontier nodes: a tree of {size} leaves has {size.bit_count()} perfect subtrees, not {len(nodes)}"
            )
        if any(len(node) != HASH_SIZE for node in nodes):
            raise ValueError(f"frontier nodes: every node is {HASH_SIZE} bytes")
        self.size = size
        self._nodes = list(nodes)

    def append(self, leaf: bytes) -> None:
        """Add a leaf (its ``leaf_hash``): the subtrees it completes merge, as carries in binary addition."""
        node = leaf
        carry = self.size
        while carry & 1:
            node = node_hash(self._nodes.pop(), node)
            carry >>= 1
        self._nodes.append(node)
        self.size += 1

    def root(self) -> bytes:
        """The RFC 6962 tree head over every leaf appended (the perfect subtrees folded from the right)."""
        if not self._nodes:
            return EMPTY_ROOT
        node = self._nodes[-1]
        for left in reversed(self._nodes[:-1]):
            node = node_hash(left, node)
        return node

    def copy(self) -> Frontier:
        return Frontier(self.size, self._nodes)

    def to_bytes(self) -> bytes:
        """The nodes, concatenated (the size is kept beside them: a head row's ``seq + 1``)."""
        return b"".join(self._nodes)

    @classmethod
    def from_bytes(cls, size: int, data: bytes) -> Frontier:
        if len(data) % HASH_SIZE:
            raise ValueError(f"frontier: {len(data)} bytes is not a whole number of {HASH_SIZE}-byte hashes")
        return cls(size, [data[i : i + HASH_SIZE] for i in range(0, len(data), HASH_SIZE)])

    @classmethod
    def of(cls, leaves: Iterable[bytes]) -> Frontier:
        frontier = cls()
        for leaf in leaves:
            frontier.append(leaf)
        return frontier


def root_of(leaves: Iterable[bytes]) -> bytes:
    return Frontier.of(leaves).root()


def _largest_power_of_two_below(n: int) -> int:
    return 1 << ((n - 1).bit_length() - 1)


def path_ranges(index: int, size: int) -> list[tuple[int, int]]:
    """The leaf ranges ``[start, end)`` whose subtree roots make the audit path of leaf ``index`` in a tree
    of ``size`` leaves, in path order (from the leaf's sibling up), as RFC 6962 section 2.1.1 ``PATH``."""
    if not 0 <= index < size:
        raise ValueError(f"leaf index {index} is outside a tree of {size} leaves")
    ranges: list[tuple[int, int]] = []
    low, high = 0, size
    while high - low > 1:
        k = _largest_power_of_two_below(high - low)
        if index - low < k:
            ranges.append((low + k, high))
            high = low + k
        else:
            ranges.append((low, low + k))
            low = low + k
    ranges.reverse()
    return ranges


class AuditPath:
    """The audit path of leaf ``index`` in a tree of ``size`` leaves, built as the leaves stream by in
    order (``add`` each, then ``path``): each range's root is built by a frontier, so ``O(log size)``
    memory however long the partition."""

    def __init__(self, index: int, size: int) -> None:
        self._ranges = path_ranges(index, size)
        self._order = sorted(range(len(self._ranges)), key=lambda i: self._ranges[i][0])
        self._roots: list[bytes | None] = [None] * len(self._ranges)
        self._cursor = 0
        self._building: Frontier | None = None
        self.seen = 0
        self.size = size

    def add(self, leaf: bytes) -> None:
        position = self.seen
        if position >= self.size:
            raise ValueError(f"audit path: more than the tree's {self.size} leaves were given")
        self.seen += 1
        if self._cursor == len(self._order):
            return
        start, end = self._ranges[self._order[self._cursor]]
        if position == start:
            self._building = Frontier()
        if self._building is not None:
            self._building.append(leaf)
            if position + 1 == end:
                self._roots[self._order[self._cursor]] = self._building.root()
                self._building = None
                self._cursor += 1

    def path(self) -> list[bytes]:
        if self.seen != self.size:
            raise ValueError(f"audit path: the tree has {self.size} leaves but {self.seen} were given")
        return [root for root in self._roots if root is not None]


def inclusion_path(leaves: Iterable[bytes], index: int, size: int) -> list[bytes]:
    """The audit path of leaf ``index`` among the first ``size`` of ``leaves`` (leaf hashes in order)."""
    builder = AuditPath(index, size)
    for position, leaf in enumerate(leaves):
        if position >= size:
            break
        builder.add(leaf)
    return builder.path()


def root_from_path(leaf: bytes, index: int, size: int, path: Sequence[bytes]) -> bytes | None:
    """The root that ``path`` proves ``leaf`` (its leaf hash) at ``index`` of ``size`` leaves belongs to, or
    None when the path has the wrong length for that position (RFC 9162 section 2.1.3.2)."""
    if not 0 <= index < size:
        return None
    fn, sn = index, size - 1
    node = leaf
    for sibling in path:
        if sn == 0:
            return None
        if fn & 1 or fn == sn:
            node = node_hash(sibling, node)
            if not fn & 1:
                while not fn & 1 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            node = node_hash(node, sibling)
        fn >>= 1
        sn >>= 1
    return node if sn == 0 else None
