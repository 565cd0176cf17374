"""The webhook server's serving certificate, from one of three sources, and its reload while the server runs.

- **Made by admitd** (the default): self-signed, valid for a year, renewed when less than 30 days remain, kept in
  `--cert-dir` as webhook.crt and webhook.key. It names every address the API server may call: the `--webhook-url`
  host (a DNS name or an IP address), the Service's DNS names (name, name.ns, name.ns.svc,
  name.ns.svc.cluster.local), 127.0.0.1, localhost and the host name.
- **Given by the operator**: a `--cert-dir` holding tls.crt and tls.key (and ca.crt, the CA for the caBundle), as
  cert-manager's Secret mounted as a volume has them. Used as is, never written; read again every few seconds, and
  a change is loaded for the next TLS handshakes.
- **Shared by replicas** (`--cert-secret NS/NAME`, the HA overlay): a Secret of type kubernetes.io/tls. The first
  replica that finds it missing creates it (creation is atomic: one wins, the others read it), the leader renews it,
  every replica reads it every few seconds and loads a change. Its ca.crt carries the new and the previous
  certificate during a renewal, so the caBundle trusts both while the replicas move over.

Every bad certificate is a one-line `CertError` naming the file or the Secret and what to do.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import ipaddress
import os
import socket
import ssl
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from daemon.kube.client import KubeClient, Obj
from daemon.kube.errors import Conflict, NotFound
from daemon.obs.logging import get_logger

log = get_logger("admitd.certs")

CERT_VALIDITY = dt.timedelta(days=365)
RENEW_BEFORE = dt.timedelta(days=30)
SELF_CERT, SELF_KEY = "webhook.crt", "webhook.key"
TLS_CERT, TLS_KEY, TLS_CA = "tls.crt", "tls.key", "ca.crt"  # a kubernetes.io/tls Secret's keys (cert-manager's)
SECRET_TYPE = "kubernetes.io/tls"


class CertError(Exception):
    """A certificate admitd cannot use: one line naming the file or the Secret, what is wrong and what to do."""


@dataclass(frozen=True, slots=True)
class ServingCert:
    cert_pem: bytes  # the serving certificate (with its chain, if the operator's file has one)
    key_pem: bytes
    not_after: dt.datetime
    ca_pem: bytes = b""  # what the API server trusts (the caBundle); empty: the certificate itself

    @property
    def ca_bundle(self) -> bytes:
        return self.ca_pem or self.cert_pem

    def due(self, now: dt.datetime) -> bool:
        return self.not_after - now < RENEW_BEFORE


def service_names(namespace: str, name: str) -> list[str]:
    """The DNS names of a Service, as a client in the cluster may write them."""
    return [name, f"{name}.{namespace}", f"{name}.{namespace}.svc", f"{name}.{namespace}.svc.cluster.local"]


def serving_names(webhook_url: str | None, service: tuple[str, str, int] | None) -> list[str]:
    """Every name the self-made certificate carries: the URL's host first (the API server calls it), then the
    Service's DNS names, then the local addresses."""
    names: list[str] = []
    if webhook_url:
        host = urlsplit(webhook_url).hostname
        if host:
            names.append(host)
    if service is not None:
        names += service_names(service[0], service[1])
    names += ["127.0.0.1", "localhost", socket.gethostname()]
    return list(dict.fromkeys(n.lower() for n in names if n))


def make_serving_cert(names: Sequence[str], now: dt.datetime | None = None) -> ServingCert:
    """A self-signed certificate for `names` (DNS names or IP addresses); it is its own CA for the caBundle."""
    now = (now or dt.datetime.now(dt.UTC)).replace(microsecond=0)  # as X.509 keeps it: read back, it is equal
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0][:64])])
    alt: list[x509.GeneralName] = []
    for name in names:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            alt.append(x509.DNSName(name))
    not_after = now + CERT_VALIDITY
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(not_after)
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return ServingCert(
        cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        key_pem=key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
        not_after=not_after,
    )


def cert_names(cert_pem: bytes) -> set[str]:
    """The DNS names and IP addresses a certificate's subjectAltName carries."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    return {str(v).lower() for v in san.get_values_for_type(x509.DNSName)} | {
        str(v) for v in san.get_values_for_type(x509.IPAddress)
    }


def checked(cert_pem: bytes, key_pem: bytes, ca_pem: bytes, *, cert_at: str, key_at: str, ca_at: str) -> ServingCert:
    """The certificate and key as a ServingCert, or a CertError naming where the broken part came from: not PEM,
    a key that does not match the certificate, a CA that is not PEM."""
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError:
        raise CertError(f"{cert_at}: not a PEM certificate; give the serving certificate there") from None
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError):
        raise CertError(f"{key_at}: not an unencrypted PEM private key; give the certificate's key there") from None
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    if key.public_key().public_bytes(serialization.Encoding.PEM, public) != cert.public_key().public_bytes(
        serialization.Encoding.PEM, public
    ):
        raise CertError(f"{key_at}: this key does not match the certificate {cert_at}; give the pair together")
    if ca_pem.strip():
        try:
            x509.load_pem_x509_certificates(ca_pem)
        except ValueError:
            raise CertError(f"{ca_at}: not PEM certificates; give the CA that signed {cert_at} there") from None
    return ServingCert(cert_pem, key_pem, cert.not_valid_after_utc, ca_pem if ca_pem.strip() else b"")


def given_by_operator(directory: Path) -> bool:
    """True when `directory` holds tls.crt or tls.key: the operator's certificate (cert-manager's Secret mounted)."""
    return (directory / TLS_CERT).exists() or (directory / TLS_KEY).exists()


def _read(path: Path, what: str, *, required: bool = True) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        if not required:
            return b""
        raise CertError(f"{path}: missing; {what}") from None
    except OSError as e:
        raise CertError(f"{path}: cannot be read ({e.strerror}); let admitd's user read it (fsGroup, mode)") from None


def load_operator_cert(directory: Path) -> ServingCert:
    """The operator's tls.crt, tls.key and (optional) ca.crt from `directory`, checked; never written."""
    cert_path, key_path, ca_path = directory / TLS_CERT, directory / TLS_KEY, directory / TLS_CA
    cert_pem = _read(cert_path, f"the serving certificate goes beside {key_path.name} (a kubernetes.io/tls Secret)")
    key_pem = _read(key_path, f"the key of {cert_path.name} goes beside it (a kubernetes.io/tls Secret)")
    ca_pem = _read(ca_path, "", required=False)
    return checked(cert_pem, key_pem, ca_pem, cert_at=str(cert_path), key_at=str(key_path), ca_at=str(ca_path))


def load_or_make_cert(directory: Path, names: Sequence[str]) -> ServingCert:
    """The self-made certificate kept in `directory` while it is valid for long enough and for these names, else a
    new one (written there)."""
    cert_path, key_path = directory / SELF_CERT, directory / SELF_KEY
    now = dt.datetime.now(dt.UTC)
    if cert_path.is_file() and key_path.is_file():
        try:
            kept = checked(
                cert_path.read_bytes(),
                key_path.read_bytes(),
                b"",
                cert_at=str(cert_path),
                key_at=str(key_path),
                ca_at="",
            )
        except CertError as e:
            log.warning("the kept webhook certificate is unusable; making a new one", error=str(e))
        else:
            if not kept.due(now) and set(names) <= cert_names(kept.cert_pem):
                return kept
    fresh = make_serving_cert(names, now)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        key_path.touch(mode=0o600)
        key_path.write_bytes(fresh.key_pem)
        cert_path.write_bytes(fresh.cert_pem)
    except OSError as e:
        raise CertError(
            f"{directory}: cannot write the webhook's certificate ({e.strerror}); give a writable --cert-dir"
        ) from None
    log.info("webhook serving certificate written", path=str(cert_path), not_after=fresh.not_after.isoformat())
    return fresh


class ServingTLS:
    """The webhook server's one SSLContext. `load` puts a new certificate in it: handshakes from then on use it;
    connections already open keep theirs (ssl's load_cert_chain on the same context)."""

    def __init__(self, cert: ServingCert, client_ca: bytes | None = None) -> None:
        if client_ca is None:
            self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        else:
            # Client certificates are asked for and verified against `client_ca` alone (the API server's front-proxy
            # CA, `daemon.kube.visibility_http`): no system CA is trusted for them. Optional, since the API
            # server's webhook calls present none.
            self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            try:
                self.context.load_verify_locations(cadata=client_ca.decode())
            except (ssl.SSLError, ValueError, UnicodeDecodeError) as e:
                raise CertError(f"the front proxy's client CA is not usable PEM ({e})") from None
            self.context.verify_mode = ssl.CERT_OPTIONAL
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self.cert = cert
        self.load(cert)

    def load(self, cert: ServingCert) -> None:
        # load_cert_chain reads files only: the checked bytes go through a private temporary directory, so that
        # what is loaded is what was checked even when the operator's files change in between.
        with tempfile.TemporaryDirectory(prefix="admitd-tls-") as tmp:
            cert_file, key_file = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
            fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(cert.key_pem)
            cert_file.write_bytes(cert.cert_pem)
            self.context.load_cert_chain(cert_file, key_file)
        self.cert = cert


# The shared Secret (HA).


def cert_from_secret(secret: Obj, where: str) -> ServingCert:
    """A kubernetes.io/tls Secret's certificate, checked; a CertError naming the Secret otherwise."""
    kind = secret.get("type") or "Opaque"
    if kind != SECRET_TYPE:
        raise CertError(
            f"Secret {where} is of type {kind}, not {SECRET_TYPE}: delete it (admitd creates it) or name another "
            "with --cert-secret"
        )
    data = secret.get("data") or {}

    def field(key: str, required: bool) -> bytes:
        raw = data.get(key)
        if not raw:
            if required:
                raise CertError(f"Secret {where}: no data.{key}; delete it (admitd creates it again)")
            return b""
        try:
            return base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError):
            raise CertError(f"Secret {where}: data.{key} is not base64") from None

    return checked(
        field(TLS_CERT, True),
        field(TLS_KEY, True),
        field(TLS_CA, False),
        cert_at=f"Secret {where} data.{TLS_CERT}",
        key_at=f"Secret {where} data.{TLS_KEY}",
        ca_at=f"Secret {where} data.{TLS_CA}",
    )


def secret_body(namespace: str, name: str, cert: ServingCert, previous: ServingCert | None) -> Obj:
    """The Secret for `cert`; its ca.crt also trusts `previous` (the certificate being replaced) while it is valid,
    so that a replica still serving the old one is trusted until it reloads."""
    ca = cert.cert_pem
    if previous is not None and previous.not_after > dt.datetime.now(dt.UTC):
        ca += previous.cert_pem
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": SECRET_TYPE,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/name": "admitd", "app.kubernetes.io/managed-by": "admitd"},
        },
        "data": {
            TLS_CERT: base64.b64encode(cert.cert_pem).decode(),
            TLS_KEY: base64.b64encode(cert.key_pem).decode(),
            TLS_CA: base64.b64encode(ca).decode(),
        },
    }


class SharedSecret:
    """The serving certificate in a kubernetes.io/tls Secret that every replica reads (`current`) and the leader
    renews (`renew`)."""

    def __init__(self, client: KubeClient, namespace: str, name: str, names: Sequence[str]) -> None:
        self.client, self.namespace, self.name, self.names = client, namespace, name, list(names)
        self.where = f"{namespace}/{name}"
        self.collection = f"/api/v1/namespaces/{namespace}/secrets"
        self.path = f"{self.collection}/{name}"

    async def _get(self) -> tuple[ServingCert, Obj] | None:
        try:
            secret = await self.client.request("GET", self.path)
        except NotFound:
            return None
        return cert_from_secret(secret, self.where), secret

    async def current(self) -> ServingCert:
        """The Secret's certificate; created here (self-made for `names`) when the Secret does not exist."""
        got = await self._get()
        if got is not None:
            return got[0]
        body = secret_body(self.namespace, self.name, make_serving_cert(self.names), None)
        cert = cert_from_secret(body, self.where)  # as every replica reads it back
        try:
            await self.client.request("POST", self.collection, body=body)
        except Conflict:  # another replica created it first: use theirs
            got = await self._get()
            if got is None:
                raise CertError(f"Secret {self.where}: created by another replica and gone again; retry") from None
            return got[0]
        log.info("serving certificate Secret created", secret=self.where, not_after=cert.not_after.isoformat())
        return cert

    async def renew(self, now: dt.datetime | None = None) -> ServingCert | None:
        """The leader's check: a new certificate written into the Secret when the current one is due for renewal or
        lacks one of `names`; None when nothing changed. A Conflict (another writer) is raised for a later retry."""
        got = await self._get()
        if got is None:
            return await self.current()
        cert, secret = got
        now = now or dt.datetime.now(dt.UTC)
        if not cert.due(now) and set(self.names) <= cert_names(cert.cert_pem):
            return None
        fresh = make_serving_cert(self.names, now)
        body: dict[str, Any] = secret_body(self.namespace, self.name, fresh, cert)
        body["metadata"]["resourceVersion"] = secret["metadata"]["resourceVersion"]
        await self.client.request("PUT", self.path, body=body)
        log.info("serving certificate Secret renewed", secret=self.where, not_after=fresh.not_after.isoformat())
        return cert_from_secret(body, self.where)
