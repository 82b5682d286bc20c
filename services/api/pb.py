"""The generated ``fedsched.v1`` modules, generated first if they are missing or stale.

Called by every module of the API, the intake and the people CLI that needs a message or a stub:
``from services.api.pb import jobs_pb2, jobs_pb2_grpc``.
"""

from __future__ import annotations

from services.api import codegen

codegen.ensure()

from services.api.gen.fedsched.v1 import (  # noqa: E402
    audit_pb2,
    audit_pb2_grpc,
    config_pb2,
    config_pb2_grpc,
    governance_pb2,
    governance_pb2_grpc,
    jobs_pb2,
    jobs_pb2_grpc,
    quota_pb2,
    quota_pb2_grpc,
    resources_pb2,
    resources_pb2_grpc,
)

#: Every service of the API, by full name (``fedsched.v1.JobService``).
SERVICES = {
    "fedsched.v1.JobService": jobs_pb2.DESCRIPTOR.services_by_name["JobService"],
    "fedsched.v1.ResourceService": resources_pb2.DESCRIPTOR.services_by_name["ResourceService"],
    "fedsched.v1.QuotaService": quota_pb2.DESCRIPTOR.services_by_name["QuotaService"],
    "fedsched.v1.AuditService": audit_pb2.DESCRIPTOR.services_by_name["AuditService"],
    "fedsched.v1.ConfigService": config_pb2.DESCRIPTOR.services_by_name["ConfigService"],
    "fedsched.v1.GovernanceService": governance_pb2.DESCRIPTOR.services_by_name["GovernanceService"],
}

__all__ = [
    "SERVICES",
    "audit_pb2",
    "audit_pb2_grpc",
    "config_pb2",
    "config_pb2_grpc",
    "governance_pb2",
    "governance_pb2_grpc",
    "jobs_pb2",
    "jobs_pb2_grpc",
    "quota_pb2",
    "quota_pb2_grpc",
    "resources_pb2",
    "resources_pb2_grpc",
]
