"""Failed runs grouped the way a rule reads them, kept up to date job by job, and the rule's triggers
cached per group until that group's failures change.

Called by the governance state (``GovState`` sets a job's failures whenever a fact about the job is
folded) and by the crash-loop and suspect-node rules (which ask for the triggers every step). Pure: no
I/O or clock. Before, every step regrouped every failed run of the whole history and rescanned every
group: a step cost time in proportion to all the failures ever seen, though only the groups with a
new failure can have a new trigger.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

Entry = tuple[Any, ...]


@dataclass(slots=True)
class FailureIndex:
    groups: dict[Hashable, set[Entry]] = field(default_factory=dict)
    of_job: dict[str, tuple[tuple[Hashable, Entry], ...]] = field(default_factory=dict)
    dirty: set[Hashable] = field(default_factory=set)
    triggers: dict[Hashable, list[Any]] = field(default_factory=dict)
    settings: Hashable = None
    """The rule settings the cached triggers were computed with."""

    def set_job(self, job_id: str, entries: Sequence[tuple[Hashable, Entry]]) -> None:
        """The job's failures now (group, entry); replaces what it had."""
        now = tuple(entries)
        before = self.of_job.get(job_id, ())
        if now == before:
            return
        kept = set(now)
        for group, entry in before:
            if (group, entry) in kept:
                continue
            members = self.groups[group]
            members.discard(entry)
            if not members:
                del self.groups[group]
            self.dirty.add(group)
        had = set(before)
        for group, entry in now:
            if (group, entry) not in had:
                self.groups.setdefault(group, set()).add(entry)
                self.dirty.add(group)
        if now:
            self.of_job[job_id] = now
        else:
            self.of_job.pop(job_id, None)

    def triggers_by_group(
        self, settings: Hashable, compute: Callable[[list[Entry]], list[Any]]
    ) -> list[tuple[Hashable, list[Any]]]:
        """Every group's triggers (groups without any left out), in group order; ``compute`` gets a
        group's entries sorted and runs again only for groups that changed, or for all when the rule's
        ``settings`` did."""
        if settings != self.settings:
            self.settings, self.triggers, self.dirty = settings, {}, set(self.groups)
        for group in self.dirty:
            found = compute(sorted(self.groups[group])) if group in self.groups else []
            if found:
                self.triggers[group] = found
            else:
                self.triggers.pop(group, None)
        self.dirty = set()
        return sorted(self.triggers.items(), key=lambda item: item[0])  # type: ignore[arg-type,return-value]


__all__ = ["Entry", "FailureIndex"]
