"""Mutual TLS at the API: a server that requires client certificates admits a client certificate of its
CA, and refuses one from a foreign CA (even a CA that copies the trusted one's name), an expired one, one
not yet valid, and a client with no certificate. Certificates are made here with ``cryptography``.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
import pytest_asyncio
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from services.api.client import CallError, Client, ClientConfig
from services.api.config import ApiConfig, TlsConfig
from services.api.pb import resources_pb2
from services.api.server import ApiServer, serve
from services.governance.api_reads import GovernanceReports
from services.governance.quota_rules import GovernanceQuotaRules
from tests.api.conftest import Stack

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.postgres]

CA_NAME = "fedsched test CA"
NOW = datetime.datetime.now(datetime.UTC)


@dataclass(frozen=True)
class Issued:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    @property
    def key_pem(self) -> bytes:
        return self.key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )


def issue(
    subject: str,
    issuer: Issued | None,
    *,
    ca: bool = False,
    client: bool = False,
    not_before: datetime.datetime = NOW - datetime.timedelta(minutes=5),
    not_after: datetime.datetime = NOW + datetime.timedelta(hours=1),
) -> Issued:
    """A certificate for ``subject``, signed by ``issuer`` (self-signed without one)."""
    key = ec.generate_private_key(ec.SECP256R1())
    issuer_name = (
        issuer.cert.subject if issuer is not None else x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    )
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )
    else:
        usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
    return Issued(key, builder.sign(issuer.key if issuer is not None else key, hashes.SHA256()))


@dataclass
class MutualTls:
    api: ApiServer
    ca: Issued
    server: str

    def client(self, certificate: Issued | None, token: str, *, ca: Issued | None = None) -> Client:
        trusted = (ca or self.ca).cert_pem
        if certificate is None:
            return Client(ClientConfig(self.server, token, ca_cert=trusted, timeout_s=10))
        return Client(
            ClientConfig(
                self.server,
                token,
                ca_cert=trusted,
                client_cert=certificate.cert_pem,
                client_key=certificate.key_pem,
                timeout_s=10,
            )
        )


@pytest_asyncio.fixture(loop_scope="session")
async def mutual_tls(stack: Stack) -> AsyncIterator[MutualTls]:
    ca = issue(CA_NAME, None, ca=True)
    server_cert = issue("localhost", ca)
    config = ApiConfig(
        log_url=stack.config.log_url,
        dsn=stack.config.dsn,
        auth=stack.config.auth,
        listen="127.0.0.1:0",
        tls=TlsConfig(server_cert.cert_pem, server_cert.key_pem, client_ca=ca.cert_pem),
        read_schema=stack.config.read_schema,
        api_schema=stack.config.api_schema,
        intake=False,
        create_topics=False,
    )
    api = await serve(
        config, quota_rules=GovernanceQuotaRules(), governance=GovernanceReports(), log=stack.log, pool=stack.pool
    )  # type: ignore[arg-type]
    try:
        yield MutualTls(api, ca, f"localhost:{api.port}")
    finally:
        await api.stop()


async def answer(client: Client) -> str:
    """``OK`` or the code of the refusal, for one cheap call; the client is closed."""
    try:
        await client.call(client.resources.ListClusters, resources_pb2.ListClustersRequest(), retries=0)
        return "OK"
    except CallError as error:
        return error.code
    finally:
        await client.close()


async def test_a_client_certificate_of_the_servers_ca_is_admitted(mutual_tls: MutualTls, stack: Stack) -> None:
    token = stack.keys.hs(roles=["viewer"])
    assert await answer(mutual_tls.client(issue("portal", mutual_tls.ca, client=True), token)) == "OK"


async def test_a_client_certificate_from_a_foreign_ca_is_refused(mutual_tls: MutualTls, stack: Stack) -> None:
    token = stack.keys.hs(roles=["viewer"])
    foreign = issue(CA_NAME, None, ca=True)  # same name as the trusted CA, another key
    assert await answer(mutual_tls.client(issue("intruder", foreign, client=True), token)) == "UNAVAILABLE"
    self_signed = issue("portal", None, client=True)
    assert await answer(mutual_tls.client(self_signed, token)) == "UNAVAILABLE"
    # The server is not disturbed by the refusals.
    assert await answer(mutual_tls.client(issue("portal", mutual_tls.ca, client=True), token)) == "OK"


async def test_an_expired_or_not_yet_valid_client_certificate_is_refused(mutual_tls: MutualTls, stack: Stack) -> None:
    token = stack.keys.hs(roles=["viewer"])
    day = datetime.timedelta(days=1)
    expired = issue("portal", mutual_tls.ca, client=True, not_before=NOW - 30 * day, not_after=NOW - day)
    assert await answer(mutual_tls.client(expired, token)) == "UNAVAILABLE"
    early = issue("portal", mutual_tls.ca, client=True, not_before=NOW + day, not_after=NOW + 30 * day)
    assert await answer(mutual_tls.client(early, token)) == "UNAVAILABLE"


async def test_a_client_without_a_certificate_is_refused_and_a_certificate_does_not_replace_a_token(
    mutual_tls: MutualTls, stack: Stack
) -> None:
    assert await answer(mutual_tls.client(None, stack.keys.hs(roles=["viewer"]))) == "UNAVAILABLE"
    trusted = issue("portal", mutual_tls.ca, client=True)
    assert await answer(mutual_tls.client(trusted, "")) == "UNAUTHENTICATED"
