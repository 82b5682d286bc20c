"""A job's pod template checked at submit time, with the Kubernetes connector's own rules.

Called by ``commands`` when a job is submitted, after the catalogue's validation. Calls the connector's
pure rules (``connectors.kubernetes.template_guard``, ``connectors.kubernetes.kinds``), so that the person
submitting hears at once what the connector would refuse when it launches the run (``JobFailed`` with
``LaunchFailed``, after the job waited for a placement):

- containers (init containers too) asking accelerators beyond the job's request: every accelerator a
  template names must be on its first container, with the quantity the job's ``resources`` ask of one
  kind of device (``gpus`` whole GPUs, ``1`` for a share of one, ``npus``). The connector checks the exact
  resource name and quantity of its placement again before making any pod.
- a ``restartPolicy`` the job's kind cannot have (the kubelet restarting what fedsched retries).

Templates of the shorthand form name no resources and no restart policy; they pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from connectors.kubernetes import kinds, template_guard
from events.catalog.jobs import JobSubmitted
from services.api.errors import InvalidArgument

FIELD = "template_json"


def _asked(event: JobSubmitted) -> int | None:
    r = event.resources
    if r.gpus:
        return r.gpus
    if r.gpu_milli:
        return 1
    return r.npus or None


def fits_its_template(event: JobSubmitted) -> JobSubmitted:
    """The submission, if its pod template asks nothing the connector would refuse (see the module)."""
    asked = _asked(event)

    def allowed(resource: str, amount: Any) -> bool:
        return asked is not None and template_guard.same_quantity(amount, asked)

    found = template_guard.problems(event.template, allowed)
    spec = event.template.get("spec")
    if isinstance(spec, Mapping):
        restart = kinds.restart_problem(event.kind, spec)
        if restart:
            found.append(restart)
    if found:
        raise InvalidArgument(FIELD, "; ".join(found))
    return event
