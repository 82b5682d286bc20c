"""Auth at the edge: every negative vector refused with the right code; roles and tenants enforced;
health open, reflection behind a token; TLS and mutual TLS."""

from __future__ import annotations

import datetime
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from services.api.client import CallError, Client, ClientConfig
from services.api.config import ApiConfig, TlsConfig
from services.api.pb import SERVICES, jobs_pb2, quota_pb2, resources_pb2
from services.api.server import serve
from services.governance.api_reads import GovernanceReports
from services.governance.quota_rules import GovernanceQuotaRules
from tests.api.conftest import Stack
from tests.api.support import spec
from tests.api.vectors import negative_vectors

pytestmark = [
    pytest.mark.asyncio(loop_scope="session"),
    pytest.mark.postgres,
    pytest.mark.filterwarnings("ignore::jwt.warnings.InsecureKeyLengthWarning"),
]


async def test_the_server_refuses_every_negative_vector_with_unauthenticated(stack: Stack) -> None:
    for name, token in negative_vectors(stack.keys).items():
        client = stack.client(token)
        with pytest.raises(CallError) as caught:
            await client.call(client.jobs.ListJobs, jobs_pb2.ListJobsRequest())
        assert caught.value.code == "UNAUTHENTICATED", name
        with pytest.raises(CallError) as caught:
            await client.call(client.jobs.SubmitJob, jobs_pb2.SubmitJobRequest(spec=spec()))
        assert caught.value.code == "UNAUTHENTICATED", name


async def test_the_server_enforces_roles_and_tenants(stack: Stack) -> None:
    keys = stack.keys
    viewer = stack.client(keys.hs(roles=["viewer"]))
    with pytest.raises(CallError) as caught:
        await viewer.call(viewer.jobs.SubmitJob, jobs_pb2.SubmitJobRequest(spec=spec()))
    assert caught.value.code == "PERMISSION_DENIED"
    wrong_tenant = stack.client(keys.hs(tenants=["team-b"]))
    with pytest.raises(CallError) as caught:
        await wrong_tenant.call(wrong_tenant.jobs.SubmitJob, jobs_pb2.SubmitJobRequest(spec=spec(tenant="team-a")))
    assert (caught.value.code, caught.value.field) == ("PERMISSION_DENIED", "tenant")
    submitter = stack.client(keys.rs())
    with pytest.raises(CallError) as caught:
        await submitter.call(
            submitter.quota.SetQuota,
            quota_pb2.SetQuotaRequest(tenant="team-a", lines=[quota_pb2.QuotaLine(resource="gpu", guaranteed=1000)]),
        )
    assert caught.value.code == "PERMISSION_DENIED"
    no_roles = stack.client(keys.hs(roles=[]))
    with pytest.raises(CallError) as caught:
        await no_roles.call(no_roles.resources.GetCapacity, resources_pb2.GetCapacityRequest())
    assert caught.value.code == "PERMISSION_DENIED"


async def test_health_is_open_and_reflection_needs_a_token(stack: Stack) -> None:
    async with grpc.aio.insecure_channel(stack.api.address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        answer = await health.Check(health_pb2.HealthCheckRequest(service="fedsched.v1.JobService"))
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async for _ in stub.ServerReflectionInfo(iter([request])):
                pass
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
        names: list[str] = []
        metadata = (("authorization", f"Bearer {stack.keys.hs(roles=['viewer'])}"),)
        async for response in stub.ServerReflectionInfo(iter([request]), metadata=metadata):
            names += [s.name for s in response.list_services_response.service]
        assert set(SERVICES) <= set(names)


def certificate(
    subject: str, key: ec.EllipticCurvePrivateKey, issuer: tuple[str, ec.EllipticCurvePrivateKey] | None, *, ca: bool
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    issuer_name, issuer_key = issuer or (subject, key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer_name)]))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if not ca:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(__import__("ipaddress").ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    return builder.sign(issuer_key, hashes.SHA256())


def pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


async def test_mutual_tls_admits_only_clients_with_a_certificate_of_the_ca(stack: Stack) -> None:
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = certificate("fedsched test CA", ca_key, None, ca=True)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server_cert = certificate("localhost", server_key, ("fedsched test CA", ca_key), ca=False)
    client_key = ec.generate_private_key(ec.SECP256R1())
    client_cert = certificate("portal", client_key, ("fedsched test CA", ca_key), ca=False)
    config = ApiConfig(
        log_url=stack.config.log_url,
        dsn=stack.config.dsn,
        auth=stack.config.auth,
        listen="127.0.0.1:0",
        tls=TlsConfig(pem(server_cert), key_pem(server_key), client_ca=pem(ca)),
        read_schema=stack.config.read_schema,
        api_schema=stack.config.api_schema,
        intake=False,
        create_topics=False,
    )
    api = await serve(
        config, quota_rules=GovernanceQuotaRules(), governance=GovernanceReports(), log=stack.log, pool=stack.pool
    )  # type: ignore[arg-type]
    token = stack.keys.hs(roles=["viewer"])
    server = f"localhost:{api.port}"
    trusted = Client(
        ClientConfig(server, token, ca_cert=pem(ca), client_cert=pem(client_cert), client_key=key_pem(client_key))
    )
    anonymous = Client(ClientConfig(server, token, ca_cert=pem(ca), timeout_s=5))
    plaintext = Client(ClientConfig(server, token, timeout_s=5))
    try:
        answer = await trusted.call(trusted.resources.ListClusters, resources_pb2.ListClustersRequest())
        assert answer is not None
        for client in (anonymous, plaintext):
            with pytest.raises(CallError) as caught:
                await client.call(client.resources.ListClusters, resources_pb2.ListClustersRequest(), retries=0)
            assert caught.value.code == "UNAVAILABLE"
    finally:
        for client in (trusted, anonymous, plaintext):
            await client.close()
        await api.stop()


async def test_the_embedded_api_of_fedsched_up_admits_its_development_token(stack: Stack, tmp_path: Path) -> None:
    from services.api.embedded import start_embedded

    api = await start_embedded(
        stack.log,  # type: ignore[arg-type]
        stack.pool,
        "127.0.0.1:0",
        quota_rules=GovernanceQuotaRules(),
        governance=GovernanceReports(),
        state_dir=tmp_path,
        intake=False,
    )
    client = Client(ClientConfig(api.server.address, api.dev_token))
    try:
        assert api.token_file.read_text().strip() == api.dev_token
        answer = await client.call(client.jobs.ListJobs, jobs_pb2.ListJobsRequest(page_size=1))
        assert answer is not None
        stale = Client(ClientConfig(api.server.address, stack.keys.admin()))
        with pytest.raises(CallError) as caught:
            await stale.call(stale.jobs.ListJobs, jobs_pb2.ListJobsRequest())
        assert caught.value.code == "UNAUTHENTICATED"
        await stale.close()
    finally:
        await client.close()
        await api.server.stop()
