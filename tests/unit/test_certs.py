"""The webhook's serving certificate (daemon/kube/certs.py) and its registration patches (daemon/kube/webhook.py).

Real: the certificates (cryptography), a TLS server (ssl + asyncio on 127.0.0.1) whose handshakes show which
certificate is served and for which names it verifies, the files in a temporary directory. The API server is not
here: the patches are applied as RFC 6902 says (tests/unit/test_kube_distributed.apply_patch) and a small stand-in
answers the shared Secret's GET/POST/PUT; the same calls run against the real API server in
tests/integration/test_webhook_registration.py.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import ipaddress
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from daemon.kube import certs, webhook
from daemon.kube.client import KubeClient
from daemon.kube.errors import Conflict, NotFound
from tests.unit.test_kube_distributed import apply_patch

SERVICE = ("admitd-system", "admitd-webhook", 443)


def _alt(names: list[str]) -> x509.SubjectAlternativeName:
    alt: list[x509.GeneralName] = []
    for n in names:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            alt.append(x509.DNSName(n))
    return x509.SubjectAlternativeName(alt)


def ca_signed(names: list[str]) -> tuple[bytes, bytes, bytes]:
    """(tls.crt, tls.key, ca.crt) as cert-manager writes them: a leaf for `names` signed by a CA of its own."""
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_subject)
        .issuer_name(ca_subject)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=90))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
        .issuer_name(ca_subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=90))
        .add_extension(_alt(names), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return (
        leaf.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
        ca.public_bytes(serialization.Encoding.PEM),
    )


def write_operator_cert(directory: Path, names: list[str]) -> tuple[bytes, bytes, bytes]:
    crt, key, ca = ca_signed(names)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tls.crt").write_bytes(crt)
    (directory / "tls.key").write_bytes(key)
    (directory / "ca.crt").write_bytes(ca)
    return crt, key, ca


@pytest.fixture
async def tls_server() -> AsyncIterator[tuple[certs.ServingTLS, int]]:
    """A TLS server on 127.0.0.1 serving whatever ServingTLS holds; yields it and its port."""
    holder: dict[str, Any] = {}

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"ok")
        await writer.drain()
        writer.close()

    first = certs.make_serving_cert(["127.0.0.1"])
    tls = certs.ServingTLS(first)
    server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=tls.context)
    holder["server"] = server
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield tls, port


async def served(port: int, ca: bytes, server_name: str) -> bytes:
    """The certificate (PEM) the server presents, verified against `ca` for `server_name`; ssl.SSLError if not."""
    ctx = ssl.create_default_context(cadata=ca.decode())
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname=server_name)
    der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    await reader.read()
    writer.close()
    return ssl.DER_cert_to_PEM_cert(der).encode()


@pytest.mark.parametrize(
    ("url", "host"),
    [
        ("https://admitd.example.test:9443", "admitd.example.test"),
        ("https://192.0.2.7:9443", "192.0.2.7"),
        ("https://[2001:db8::7]:9443", "2001:db8::7"),
    ],
)
async def test_the_self_made_certificate_names_the_url_host_and_the_service(
    tmp_path: Path, url: str, host: str, tls_server: tuple[certs.ServingTLS, int]
) -> None:
    names = certs.serving_names(url, SERVICE)
    assert names[0] == host
    assert {
        "admitd-webhook",
        "admitd-webhook.admitd-system",
        "admitd-webhook.admitd-system.svc",
        "admitd-webhook.admitd-system.svc.cluster.local",
    } <= set(names)
    cert = certs.load_or_make_cert(tmp_path, names)
    assert host in certs.cert_names(cert.cert_pem)
    tls, port = tls_server
    tls.load(cert)
    # The API server verifies the certificate against the caBundle for the host it calls.
    for name in (host, "admitd-webhook.admitd-system.svc", "127.0.0.1"):
        assert await served(port, cert.ca_bundle, name) == cert.cert_pem
    with pytest.raises(ssl.SSLCertVerificationError):
        await served(port, cert.ca_bundle, "other.example.test")


def test_the_serving_certificate_is_kept_while_valid_and_renewed_30_days_before_it_ends(tmp_path: Path) -> None:
    names = ["127.0.0.1", "admitd-webhook.admitd-system.svc"]
    first = certs.load_or_make_cert(tmp_path, names)
    assert certs.load_or_make_cert(tmp_path, names).cert_pem == first.cert_pem, "a valid certificate is kept"
    assert certs.load_or_make_cert(tmp_path, [*names, "other.example"]).cert_pem != first.cert_pem, "new names"
    old = certs.make_serving_cert(names, now=dt.datetime.now(dt.UTC) - dt.timedelta(days=340))
    (tmp_path / "webhook.crt").write_bytes(old.cert_pem)
    (tmp_path / "webhook.key").write_bytes(old.key_pem)
    renewed = certs.load_or_make_cert(tmp_path, names)
    assert renewed.cert_pem != old.cert_pem and not renewed.due(dt.datetime.now(dt.UTC))
    assert (tmp_path / "webhook.crt").read_bytes() == renewed.cert_pem


async def test_the_operators_certificate_is_used_as_is_and_a_change_reaches_new_handshakes(
    tmp_path: Path, tls_server: tuple[certs.ServingTLS, int]
) -> None:
    crt, key, ca = write_operator_cert(tmp_path, ["admitd-webhook.admitd-system.svc"])
    assert certs.given_by_operator(tmp_path)
    given = certs.load_operator_cert(tmp_path)
    assert (given.cert_pem, given.key_pem, given.ca_bundle) == (crt, key, ca), "the caBundle is the CA, not the leaf"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ca.crt", "tls.crt", "tls.key"], "nothing written"
    tls, port = tls_server
    tls.load(given)
    assert await served(port, ca, "admitd-webhook.admitd-system.svc") == crt
    # cert-manager renews: the files change under the running server; the next handshake has the new certificate.
    crt2, _, ca2 = write_operator_cert(tmp_path, ["admitd-webhook.admitd-system.svc"])
    tls.load(certs.load_operator_cert(tmp_path))
    assert await served(port, ca2, "admitd-webhook.admitd-system.svc") == crt2
    assert (tmp_path / "tls.crt").read_bytes() == crt2


def test_a_missing_unreadable_or_mismatched_certificate_is_one_line_naming_the_file(tmp_path: Path) -> None:
    crt, key, _ = write_operator_cert(tmp_path, ["127.0.0.1"])
    (tmp_path / "tls.crt").unlink()
    with pytest.raises(certs.CertError) as missing:
        certs.load_operator_cert(tmp_path)
    assert str(missing.value).startswith(f"{tmp_path / 'tls.crt'}: missing")
    (tmp_path / "tls.crt").mkdir()  # unreadable as a file (the tests run as root, so a mode would not stop them)
    with pytest.raises(certs.CertError) as unreadable:
        certs.load_operator_cert(tmp_path)
    assert str(unreadable.value).startswith(f"{tmp_path / 'tls.crt'}: cannot be read")
    (tmp_path / "tls.crt").rmdir()
    (tmp_path / "tls.crt").write_bytes(crt)
    _, other_key, _ = ca_signed(["127.0.0.1"])
    (tmp_path / "tls.key").write_bytes(other_key)
    with pytest.raises(certs.CertError) as mismatch:
        certs.load_operator_cert(tmp_path)
    assert str(mismatch.value) == (
        f"{tmp_path / 'tls.key'}: this key does not match the certificate {tmp_path / 'tls.crt'}; "
        "give the pair together"
    )
    (tmp_path / "tls.key").write_bytes(key)
    (tmp_path / "tls.crt").write_bytes(b"not a certificate")
    with pytest.raises(certs.CertError, match=r"tls\.crt: not a PEM certificate"):
        certs.load_operator_cert(tmp_path)
    for error in (missing, unreadable, mismatch):
        assert "\n" not in str(error.value)


class SecretStore:
    """Stands in for the API server on Secrets in one namespace: GET, POST (409 when it exists), PUT (409 on a stale
    resourceVersion)."""

    def __init__(self) -> None:
        self.secrets: dict[str, dict[str, Any]] = {}
        self.version = 0
        self.calls: list[str] = []

    async def request(self, method: str, path: str, *, body: Any = None, **_: Any) -> Any:
        self.calls.append(method)
        name = path.rsplit("/", 1)[1]
        if method == "GET":
            if name not in self.secrets:
                raise NotFound(method, path, 404, "not found")
            return self.secrets[name]
        if method == "POST":
            name = body["metadata"]["name"]
            if name in self.secrets:
                raise Conflict(method, path, 409, "AlreadyExists")
        elif (
            method == "PUT" and body["metadata"]["resourceVersion"] != self.secrets[name]["metadata"]["resourceVersion"]
        ):
            raise Conflict(method, path, 409, "the object has been modified")
        self.version += 1
        stored = {**body, "metadata": {**body["metadata"], "resourceVersion": str(self.version)}}
        self.secrets[name] = stored
        return stored


async def test_the_shared_secret_is_created_once_read_by_every_replica_and_renewed_by_the_leader() -> None:
    store = SecretStore()
    names = certs.serving_names(None, SERVICE)
    first = certs.SharedSecret(store, "admitd-system", "admitd-serving-cert", names)  # type: ignore[arg-type]
    second = certs.SharedSecret(store, "admitd-system", "admitd-serving-cert", names)  # type: ignore[arg-type]
    a, b = await asyncio.gather(first.current(), second.current())
    assert a == b, "two replicas starting together share one certificate"
    assert store.secrets["admitd-serving-cert"]["type"] == "kubernetes.io/tls"
    assert await first.renew() is None, "not due: nothing written"
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=340)
    renewed = await first.renew(now=later)
    assert renewed is not None and renewed.cert_pem != a.cert_pem
    assert await second.current() == renewed, "the other replica reads the renewed one"
    # During the switch the caBundle trusts both: a replica still serving the old certificate is not refused.
    trusted = {c.public_bytes(serialization.Encoding.PEM) for c in x509.load_pem_x509_certificates(renewed.ca_bundle)}
    assert trusted == {a.cert_pem, renewed.cert_pem}


async def test_a_secret_of_the_wrong_type_is_one_line_naming_it() -> None:
    store = SecretStore()
    store.secrets["admitd-serving-cert"] = {
        "type": "Opaque",
        "metadata": {"name": "admitd-serving-cert", "resourceVersion": "1"},
        "data": {"tls.crt": base64.b64encode(b"x").decode()},
    }
    shared = certs.SharedSecret(store, "admitd-system", "admitd-serving-cert", ["127.0.0.1"])  # type: ignore[arg-type]
    with pytest.raises(certs.CertError) as wrong:
        await shared.current()
    assert str(wrong.value) == (
        "Secret admitd-system/admitd-serving-cert is of type Opaque, not kubernetes.io/tls: delete it (admitd "
        "creates it) or name another with --cert-secret"
    )
    assert store.calls == ["GET"], "nothing overwritten"


def shipped(hook: webhook.Hook, client_config: dict[str, Any]) -> dict[str, Any]:
    """A configuration as config/ ships it (and the API server defaults it): through the Service, no caBundle."""
    body = webhook.webhook_configuration(b"", url=None, service=SERVICE, failure_policy="Fail", hook=hook)
    body["webhooks"].insert(0, {"name": "someone-elses.example.com", "clientConfig": {"url": "https://x/y"}})
    body["webhooks"][1]["clientConfig"] = client_config
    body["webhooks"][1]["namespaceSelector"] = {}
    return body


@pytest.mark.parametrize("hook", [webhook.MUTATING, webhook.VALIDATING], ids=lambda h: h.kind)
def test_registration_switches_clientconfig_whole_between_url_and_service(hook: webhook.Hook) -> None:
    service_form = {"service": {"namespace": "admitd-system", "name": "admitd-webhook", "path": hook.path, "port": 443}}
    current = shipped(hook, service_form)
    ops = webhook.registration_patch(
        current, hook, b"CA1", url="https://10.0.0.5:9443/", service=None, failure_policy="Fail", namespaces=None
    )
    by_url = apply_patch(current, ops)
    assert by_url["webhooks"][1]["clientConfig"] == {
        "caBundle": base64.b64encode(b"CA1").decode(),
        "url": f"https://10.0.0.5:9443{hook.path}",
    }, "the service form is gone, not kept beside the URL"
    assert by_url["webhooks"][0] == current["webhooks"][0], "another webhook in the list is left alone"
    ops = webhook.registration_patch(
        by_url, hook, b"CA2", url=None, service=SERVICE, failure_policy="Ignore", namespaces=None
    )
    by_service = apply_patch(by_url, ops)
    assert by_service["webhooks"][1]["clientConfig"] == {"caBundle": base64.b64encode(b"CA2").decode(), **service_form}
    assert by_service["webhooks"][1]["failurePolicy"] == "Ignore"


def test_registration_refuses_a_configuration_without_its_webhook() -> None:
    current = {"metadata": {"name": "admitd"}, "webhooks": [{"name": "other.example.com"}]}
    with pytest.raises(webhook.RegistrationError, match=r"has no webhook named mjob\.admitd\.io: re-apply config/"):
        webhook.registration_patch(
            current, webhook.MUTATING, b"CA", url=None, service=SERVICE, failure_policy="Fail", namespaces=None
        )


class ConfigStore:
    """GET answers NotFound until something is created; POST stores it."""

    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []

    async def request(self, method: str, path: str, *, body: Any = None, **_: Any) -> Any:
        if method == "GET":
            raise NotFound(method, path, 404, "not found")
        assert method == "POST"
        self.created.append(body)
        return body


async def test_a_missing_configuration_is_an_error_unless_creating_is_asked_for() -> None:
    store = ConfigStore()
    client = cast(KubeClient, store)
    with pytest.raises(webhook.RegistrationError) as missing:
        await webhook.register(client, webhook.VALIDATING, b"CA", url=None, service=SERVICE, failure_policy="Fail")
    assert str(missing.value).startswith(
        "ValidatingWebhookConfiguration admitd is not installed: apply config/ (kubectl apply --server-side -k config/)"
    )
    assert store.created == []
    await webhook.register(
        client,
        webhook.VALIDATING,
        b"CA",
        url="https://127.0.0.1:9443",
        service=None,
        failure_policy="Fail",
        create=True,
    )
    [created] = store.created
    assert created["kind"] == "ValidatingWebhookConfiguration"
    assert created["webhooks"][0]["name"] == "vjob.admitd.io"
    assert {op for rule in created["webhooks"][0]["rules"] for op in rule["operations"]} == {"CREATE", "UPDATE"}


def test_the_conversion_clientconfig_is_replaced_whole() -> None:
    crd = {
        "spec": {
            "conversion": {
                "strategy": "Webhook",
                "webhook": {
                    "clientConfig": {"url": "https://127.0.0.1:9443/convert", "caBundle": "b2xk"},
                    "conversionReviewVersions": ["v1"],
                },
            }
        }
    }
    ops = webhook.conversion_patch(crd, b"CA", url=None, service=SERVICE)
    assert ops is not None
    out = apply_patch(crd, ops)
    assert out["spec"]["conversion"]["webhook"]["clientConfig"] == {
        "caBundle": base64.b64encode(b"CA").decode(),
        "service": {"namespace": "admitd-system", "name": "admitd-webhook", "port": 443, "path": "/convert"},
    }
    assert (
        webhook.conversion_patch({"spec": {"conversion": {"strategy": "None"}}}, b"CA", url=None, service=SERVICE)
        is None
    )


def test_the_new_form_is_handed_to_whoever_applied_the_part_that_holds_it() -> None:
    at = ["f:spec", "f:conversion", "f:webhook", "f:clientConfig"]
    service = {"f:name": {}, "f:namespace": {}, "f:path": {}, "f:port": {}}

    def client_config(entry: dict[str, Any]) -> Any:
        return entry["fieldsV1"]["f:spec"]["f:conversion"]["f:webhook"].get("f:clientConfig")

    # After admitd replaced service with url: the applier's ownership of service went with the field.
    fields = [
        {
            "manager": "kubectl",
            "operation": "Apply",
            "fieldsV1": {
                "f:spec": {"f:conversion": {"f:strategy": {}, "f:webhook": {"f:conversionReviewVersions": {}}}}
            },
        },
        {
            "manager": "admitd",
            "operation": "Update",
            "fieldsV1": {
                "f:spec": {"f:conversion": {"f:webhook": {"f:clientConfig": {"f:caBundle": {}, "f:url": {}}}}}
            },
        },
        {"manager": "kube-apiserver", "operation": "Update", "fieldsV1": {"f:status": {}}},
    ]
    out = webhook.hand_over(fields, at, to_url=True)
    assert out is not None
    assert client_config(out[0]) == {"f:url": {}}, "the applier owns the url now: its next apply replaces it"
    assert client_config(out[1]) == {"f:caBundle": {}}, "admitd keeps the caBundle only"
    assert out[2] == fields[2]
    assert client_config(fields[0]) is None, "the input is not changed"
    assert webhook.hand_over(out, at, to_url=True) is None, "already handed over: nothing to write"
    # Back to the Service (the in-cluster daemon): the applier is given the service form in the url's place.
    back = webhook.hand_over(out, at, to_url=False)
    assert back is not None
    assert client_config(back[0]) == {"f:service": service}
    # Nobody applied the object (created by POST): nothing to hand over.
    assert webhook.hand_over(fields[1:], at, to_url=True) is None
