"""The visibility API's HTTP side (daemon.kube.visibility_http): the front proxy's settings as the API server writes
them, who a request is from, and a real HTTPS server trusting the front-proxy CA alone; the featureGates switch."""

from __future__ import annotations

import base64
import datetime as dt
import json
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from daemon.domain.model import PriorityClass
from daemon.kube import certs
from daemon.kube import visibility as vis
from daemon.kube import visibility_http as vh
from daemon.manifests.config import parse_config
from tests.unit.test_visibility import rows, world

ROOT = vis.ROOT


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def make_ca(cn: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key, name = _key(), x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def client_cert(ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey], cn: str, at: Path) -> tuple[str, str]:
    """A clientAuth certificate for `cn` signed by `ca`, written to `at`: (cert file, key file)."""
    key, now = _key(), dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
        .issuer_name(ca[0].subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca[1], hashes.SHA256())
    )
    cert_file, key_file = at / f"{cn}.crt", at / f"{cn}.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(_pem(key))
    return str(cert_file), str(key_file)


def configmap(ca_pem: str, **overrides: str) -> dict[str, Any]:
    """extension-apiserver-authentication as kube-apiserver writes it (each list a JSON string)."""
    data = {
        "client-ca-file": "unused",
        "requestheader-client-ca-file": ca_pem,
        "requestheader-allowed-names": '["front-proxy-client"]',
        "requestheader-username-headers": '["X-Remote-User"]',
        "requestheader-group-headers": '["X-Remote-Group"]',
        "requestheader-extra-headers-prefix": '["X-Remote-Extra-"]',
        **overrides,
    }
    return {"apiVersion": "v1", "kind": "ConfigMap", "data": data}


CA_PEM = make_ca("front-proxy-ca")[0].public_bytes(serialization.Encoding.PEM).decode()
PEERCERT = {"subject": ((("commonName", "front-proxy-client"),),)}


def test_the_front_proxy_settings_are_read_as_the_api_server_writes_them() -> None:
    fp = vh.front_proxy_of(configmap(CA_PEM))
    assert fp.ca_pem == CA_PEM.encode() and fp.allowed_names == {"front-proxy-client"}
    assert (fp.username_headers, fp.group_headers, fp.extra_prefixes) == (
        ("X-Remote-User",),
        ("X-Remote-Group",),
        ("X-Remote-Extra-",),
    )
    with pytest.raises(vh.VisibilityConfigError, match="--requestheader-client-ca-file"):
        vh.front_proxy_of(configmap(""))
    with pytest.raises(vh.VisibilityConfigError, match="requestheader-group-headers is not a JSON list"):
        vh.front_proxy_of(configmap(CA_PEM, **{"requestheader-group-headers": "X-Remote-Group"}))
    with pytest.raises(vh.VisibilityConfigError, match="--requestheader-username-headers"):
        vh.front_proxy_of(configmap(CA_PEM, **{"requestheader-username-headers": "[]"}))


def test_the_user_is_read_from_the_headers_only_with_the_front_proxys_certificate() -> None:
    fp = vh.front_proxy_of(configmap(CA_PEM))
    headers = [
        ("x-remote-user", "alice"),
        ("X-Remote-Group", "team-a"),
        ("X-Remote-Group", "system:authenticated"),
        ("X-Remote-Extra-Scopes", "a"),
        ("X-Remote-Extra-Scopes", "b"),
        ("X-Other", "x"),
    ]
    user = vh.identify(fp, PEERCERT, headers)
    assert (user.name, user.groups, dict(user.extra)) == (
        "alice",
        ("team-a", "system:authenticated"),
        {"scopes": ("a", "b")},
    )
    for peercert, why in (
        (None, "no client certificate"),
        ({}, "no client certificate"),
        ({"subject": ((("commonName", "someone-else"),),)}, "not in requestheader-allowed-names"),
    ):
        with pytest.raises(vis.VisibilityError, match=why) as e:
            vh.identify(fp, peercert, headers)
        assert (e.value.code, e.value.reason) == (401, "Unauthorized")
    with pytest.raises(vis.VisibilityError, match="named no user"):
        vh.identify(fp, PEERCERT, [("X-Remote-Group", "g")])
    # No allowed names: any certificate the CA signed (as Kubernetes).
    anyone = vh.front_proxy_of(configmap(CA_PEM, **{"requestheader-allowed-names": "[]"}))
    assert vh.identify(anyone, {"subject": ((("commonName", "x"),),)}, headers).name == "alice"


def test_the_apiservice_gets_the_ca_bundle_and_tls_verification_back() -> None:
    bundle = b"-----BEGIN CERTIFICATE-----\nabc\n-----END CERTIFICATE-----\n"
    encoded = base64.b64encode(bundle).decode()
    live = {"metadata": {"name": vh.APISERVICE_NAME}, "spec": {"insecureSkipTLSVerify": True}}
    assert vh.ca_bundle_patch(live, bundle) == [
        {"op": "test", "path": "/metadata/name", "value": vh.APISERVICE_NAME},
        {"op": "add", "path": "/spec/caBundle", "value": encoded},
        {"op": "add", "path": "/spec/insecureSkipTLSVerify", "value": False},
    ]
    assert vh.ca_bundle_patch({"spec": {"caBundle": encoded}}, bundle) is None


def test_a_forbidden_status_names_the_user_and_the_resource() -> None:
    user = vh.User("bob", (), {})
    attrs = vh.resource_attributes("localqueues", "ns", "q1")
    status = vh.forbidden(user, attrs, "").status()
    assert (status["code"], status["reason"]) == (403, "Forbidden")
    assert status["message"] == (
        'localqueues/pendingworkloads.visibility.kueue.x-k8s.io "q1" is forbidden: User "bob" cannot get resource '
        '"localqueues/pendingworkloads" in API group "visibility.kueue.x-k8s.io" in the namespace "ns"'
    )


def test_visibility_on_demand_is_a_feature_gate_off_by_default() -> None:
    doc = {"apiVersion": "config.kueue.x-k8s.io/v1beta1", "kind": "Configuration"}
    assert parse_config(doc)[0].visibility_on_demand is False
    engine, warnings = parse_config({**doc, "featureGates": {"VisibilityOnDemand": True}})
    assert engine.visibility_on_demand is True and engine.partial_admission is True and warnings == ()


class Policy(vh.Authorizer):
    """The API server's answer to each SubjectAccessReview, given here as a set of allowed (user, resource) pairs;
    everything else about the Authorizer (the spec it builds, its cache) is the real one."""

    def __init__(self, allowed: set[tuple[str, str]]) -> None:
        super().__init__(client=None)  # type: ignore[arg-type]
        self.allowed_pairs, self.specs = allowed, []
        self.client = self  # type: ignore[assignment]

    async def request(self, method: str, path: str, *, body: Mapping[str, Any], **_: Any) -> dict[str, Any]:
        assert (method, path) == ("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews")
        spec = body["spec"]
        self.specs.append(spec)
        what = (spec.get("resourceAttributes") or {}).get("resource") or spec["nonResourceAttributes"]["path"]
        return {"status": {"allowed": (spec["user"], what) in self.allowed_pairs}}


async def test_an_https_server_trusts_the_front_proxy_ca_alone_and_authorizes_each_user(tmp_path: Path) -> None:
    front_ca, other_ca = make_ca("front-proxy-ca"), make_ca("cluster-ca")
    proxy_cert = client_cert(front_ca, "front-proxy-client", tmp_path)
    (tmp_path / "other").mkdir()
    foreign = client_cert(other_ca, "front-proxy-client", tmp_path / "other")  # the same name, another CA
    ca_pem = front_ca[0].public_bytes(serialization.Encoding.PEM).decode()
    fp = vh.front_proxy_of(configmap(ca_pem))
    serving = certs.make_serving_cert(["127.0.0.1"])
    tls = certs.ServingTLS(serving, fp.ca_pem)
    assert tls.context.minimum_version == ssl.TLSVersion.TLSv1_2 and tls.context.verify_mode == ssl.CERT_OPTIONAL
    policy = Policy({("alice", "clusterqueues"), ("alice", vis.ROOT), ("system:kube-aggregator", vis.ROOT)})
    state = world()
    app = web.Application()
    vh.add_routes(app, state.view, fp, policy)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls.context)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    base = f"https://127.0.0.1:{port}"

    def client_context(cert: tuple[str, str] | None) -> ssl.SSLContext:
        context = ssl.create_default_context(cadata=serving.cert_pem.decode())
        if cert is not None:
            context.load_cert_chain(*cert)
        return context

    async def get(path: str, user: str | None, cert: tuple[str, str] | None = proxy_cert) -> tuple[int, Any]:
        headers = {"X-Remote-User": user, "X-Remote-Group": "system:authenticated"} if user else {}
        async with aiohttp.ClientSession() as s, s.get(base + path, headers=headers, ssl=client_context(cert)) as r:
            return r.status, json.loads(await r.read())

    try:
        status, body = await get(f"{ROOT}/clusterqueues/cq-a/pendingworkloads?limit=2", "alice")
        assert status == 200 and rows(body) == [("c", 100, "q1", 0, 0), ("a", 0, "q1", 1, 1)]
        assert policy.specs[-1] == {
            "user": "alice",
            "groups": ["system:authenticated"],
            "extra": {},
            "resourceAttributes": {
                "verb": "get",
                "group": "visibility.kueue.x-k8s.io",
                "version": "v1beta1",
                "resource": "clusterqueues",
                "subresource": "pendingworkloads",
                "name": "cq-a",
            },
        }
        reviews = policy.reviews
        assert (await get(f"{ROOT}/clusterqueues/cq-a/pendingworkloads", "alice"))[0] == 200
        assert policy.reviews == reviews  # the same question within 10 s: answered from the cache
        status, body = await get(ROOT, "alice")
        assert status == 200 and body["kind"] == "APIResourceList"
        # Not allowed: a Forbidden Status; a user RBAC does not know, on a LocalQueue alice may not read either.
        status, body = await get(f"{ROOT}/namespaces/ns/localqueues/q1/pendingworkloads", "alice")
        assert (status, body["kind"], body["reason"]) == (403, "Status", "Forbidden")
        assert policy.specs[-1]["resourceAttributes"]["namespace"] == "ns"
        status, body = await get(f"{ROOT}/clusterqueues/cq-a/pendingworkloads", "mallory")
        assert status == 403 and '"mallory"' in body["message"]
        # Allowed but unknown, or a bad parameter: Kueue's NotFound and BadRequest.
        policy.allowed_pairs.add(("alice", "localqueues"))
        status, body = await get(f"{ROOT}/namespaces/ns/localqueues/nope/pendingworkloads", "alice")
        assert (status, body["reason"], body["details"]["kind"]) == (404, "NotFound", "localqueue")
        status, body = await get(f"{ROOT}/clusterqueues/cq-a/pendingworkloads?offset=x", "alice")
        assert (status, body["reason"]) == (400, "BadRequest") and "'offset'" in body["message"]
        # Headers without the front proxy's certificate are not believed; another CA's certificate is refused by TLS.
        status, body = await get(f"{ROOT}/clusterqueues/cq-a/pendingworkloads", "alice", cert=None)
        assert (status, body["reason"]) == (401, "Unauthorized")
        with pytest.raises(aiohttp.ClientError):
            await get(f"{ROOT}/clusterqueues/cq-a/pendingworkloads", "alice", cert=foreign)
        # The fold moves on: the next answer is the live state's.
        from daemon.domain import events as ev  # noqa: PLC0415
        from tests.samples import workload  # noqa: PLC0415

        state.apply(ev.JobObserved(workload=workload("f", ns="ns", queue="q2", created_at=500)), state.seq + 1)
        status, body = await get(f"{ROOT}/clusterqueues/cq-a/pendingworkloads?limit=2", "alice")
        assert status == 200 and rows(body) == [("c", 100, "q1", 0, 0), ("f", 0, "q2", 1, 0)]
    finally:
        await runner.cleanup()


def test_the_daemon_prepares_each_pending_rows_metadata_before_a_list_asks() -> None:
    """`remember_pending` at start and `remember_observed` (the recorder's listener) make what a list shows, so that
    a list makes nothing (the cold list was 250 ms at 10,000 rows)."""
    from daemon.domain import events as ev  # noqa: PLC0415
    from tests.samples import workload  # noqa: PLC0415

    state = world()
    vis._REFS.clear()
    assert vh.remember_pending(state.view()) == 5 and len(vis._REFS) == 5
    before = dict(vis._REFS)
    listed = vis.cluster_queue_pending(state.view(), "cq-a")
    assert before == vis._REFS  # nothing made by the list
    assert [i["metadata"] for i in listed["items"]] == [json.loads(before[k]) for k in _order(before, listed)]
    late = workload("late", ns="ns", queue="q1", created_at=9_000)
    vh.remember_observed(ev.JobObserved(workload=late), 99)
    assert len(vis._REFS) == 6
    vh.remember_observed(ev.PriorityClassObserved(priority_class=PriorityClass(name="x", value=1)), 100)
    assert len(vis._REFS) == 6  # only Jobs


def _order(refs: dict[Any, Any], listed: dict[str, Any]) -> list[Any]:
    by_name = {json.loads(v)["name"]: k for k, v in refs.items()}
    return [by_name[i["metadata"]["name"]] for i in listed["items"]]
