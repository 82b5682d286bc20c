"""The archiver's signer: the archive's heads signed at a fixed cadence and kept outside the database.

Called by the archiver (``events.audit.archive.AuditArchiver``), which hands it the heads after a pass
(``offer``); built by ``fedsched audit archive --signing-key FILE --checkpoint-dir DIR`` (and by whoever
composes an archiver with a key). Calls the pure ``events.audit.checkpoint`` to sign, the checkpoint
directory (``events.audit.checkpoint_files``) and the event log (a ``LogSink``), and reads the clock.

A checkpoint is made when the heads moved since the previous one (the checkpoint topic's own head left
out: each checkpoint's record moves it), at most once per ``every_s`` in a following archiver, and at
the end of every batch catch-up. It goes first to the directory (its number is claimed there, so two
archivers sharing the directory never sign one number twice: the loser reads the winner's and signs on
top of it next time), then to the log as a record of the checkpoint topic whose value is the file's
bytes. A record the log refused is published again before the next checkpoint.

Before signing, the heads are checked against the previous checkpoint: a partition behind where it was
signed, gone, or different at the same seq means the archive was rewound or rewritten under the
archiver. It then refuses to sign (an error in its log and a counter on ``/metrics``) rather than bless
that state; ``fedsched audit chain --verify --public-key`` names what happened.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from events.audit.checkpoint import (
    CONTENT_TYPE,
    Checkpoint,
    CheckpointError,
    PartitionHead,
    behind,
    key_id,
    moved,
    sign,
)
from events.audit.checkpoint_files import CheckpointDir
from events.catalog.topics import AUDIT
from events.hosting.sink import LogSink
from events.log.contract import EventLog, OutRecord
from events.plumbing.metrics import Sample
from events.plumbing.outage import Unreachable, reaching

log = logging.getLogger("fedsched.audit")

DEPENDENCY = "checkpoint-dir"
"""What ``/healthz`` names while the checkpoint directory cannot be read or written (the archiver keeps
archiving between attempts, as through any outage)."""


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class Checkpointer:
    """Signs the archive's heads with ``key`` into ``directory`` and onto ``topic`` of ``event_log``."""

    def __init__(
        self,
        key: Ed25519PrivateKey,
        directory: CheckpointDir,
        *,
        event_log: EventLog | None = None,
        every_s: float = 60.0,
        topic: str = AUDIT.name,
        clock_ms: Callable[[], int] = _wall_clock_ms,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if every_s <= 0:
            raise ValueError(f"checkpoint cadence: {every_s} s is not a positive number of seconds")
        self._key = key
        self._key_id = key_id(key.public_key())
        self.directory = directory
        self.every_s = every_s
        self.topic = topic
        self._sink = None if event_log is None else LogSink(event_log, None)
        self._clock_ms = clock_ms
        self._monotonic = monotonic
        self._previous: Checkpoint | None = None
        self._loaded = False
        self._last_look: float | None = None
        self._unpublished: list[Checkpoint] = []
        self.made_total = 0
        self.refused_total = 0
        self.looked_total = 0
        """How many times the heads were looked at (signed or not): the cadence at work."""
        self.newest: Checkpoint | None = None

    def samples(self) -> list[Sample]:
        samples: list[Sample] = [
            ("fedsched_audit_checkpoints_total", {}, self.made_total),
            ("fedsched_audit_checkpoints_refused_total", {}, self.refused_total),
        ]
        if self._previous is not None:
            samples.append(("fedsched_audit_checkpoint_seq", {}, self._previous.seq))
        return samples

    def due(self) -> bool:
        """Whether the cadence allows a look at the heads now."""
        return self._last_look is None or self._monotonic() - self._last_look >= self.every_s

    async def offer(self, heads: Sequence[PartitionHead], *, at_cadence: bool = True) -> Checkpoint | None:
        """Sign ``heads`` if they moved since the previous checkpoint (and, ``at_cadence``, if the cadence
        allows); the checkpoint made, or None."""
        if at_cadence and not self.due():
            return None
        self._last_look = self._monotonic()
        self.looked_total += 1
        await self._publish()
        trusted, previous = await self._previous_checkpoint()
        if not trusted:
            return None
        if not moved(previous, heads, ignore_topics=(self.topic,)):
            return None
        if previous is not None:
            regressed = behind(previous, heads)
            if regressed:
                self.refused_total += 1
                log.error(
                    "event=audit_checkpoint_refused previous=%d reason=%s detail=run fedsched audit chain --verify",
                    previous.seq,
                    "; ".join(regressed),
                )
                return None
        checkpoint = sign(previous, heads, self._clock_ms(), self._key)
        try:
            path = await asyncio.to_thread(self.directory.write, checkpoint)
        except FileExistsError:
            # Another archiver signed this number first: sign on top of its checkpoint next time.
            self._loaded = False
            log.info("event=audit_checkpoint_taken seq=%d detail=another archiver signed it", checkpoint.seq)
            return None
        except OSError as error:
            raise Unreachable(DEPENDENCY, error) from error
        self._previous = self.newest = checkpoint
        self.made_total += 1
        log.info(
            "event=audit_checkpoint_signed seq=%d partitions=%d file=%s",
            checkpoint.seq,
            len(checkpoint.partitions),
            path,
        )
        self._unpublished.append(checkpoint)
        await self._publish()
        return checkpoint

    async def _previous_checkpoint(self) -> tuple[bool, Checkpoint | None]:
        """Whether the directory's newest checkpoint can be trusted (if not, nothing may be signed on top of
        it), and the checkpoint to sign after (None: this is the first)."""
        if self._loaded:
            return True, self._previous
        try:
            newest = await asyncio.to_thread(self.directory.newest)
        except OSError as error:
            raise Unreachable(DEPENDENCY, error) from error
        except CheckpointError as error:
            self.refused_total += 1
            log.error("event=audit_checkpoint_refused reason=the newest checkpoint is unreadable: %s", error)
            return False, None
        if newest is not None:
            source, checkpoint = newest
            if checkpoint.key_id == self._key_id:
                why = checkpoint.signature_problem({self._key_id: self._key.public_key()})
                if why is not None:
                    self.refused_total += 1
                    log.error("event=audit_checkpoint_refused file=%s reason=%s", source, why)
                    return False, None
            else:
                log.warning(
                    "event=audit_checkpoint_key_changed file=%s previous_key=%s key=%s"
                    " detail=continuing the series under this key; verifiers need both public keys",
                    source,
                    checkpoint.key_id,
                    self._key_id,
                )
            self._previous = checkpoint
        self._loaded = True
        return True, self._previous

    async def _publish(self) -> None:
        if self._sink is None or not self._unpublished:
            return
        records = [
            OutRecord(self.topic, value=c.to_bytes(), headers=(("content-type", CONTENT_TYPE),))
            for c in self._unpublished
        ]
        with reaching("log"):
            await self._sink.commit(records)
        self._unpublished.clear()

    async def close(self) -> None:
        if self._sink is not None:
            await self._sink.close()
