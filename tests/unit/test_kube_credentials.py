"""Credentials that rotate (daemon/kube/credentials.py), without a cluster: the token file and the exec plugin.

Real: the plugins are real programs (small Python scripts run as a kubeconfig's `exec.command`), the kubeconfig is
loaded by `load_configuration` as `admitd run` loads it, the failing case is the real `admitd run`. Faked: the clock
that decides when a token is stale or expired. tests/integration/test_credentials_rotate.py shows the same against
the real API server (a 401, who the server says the caller is).
"""

from __future__ import annotations

import datetime as dt
import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from daemon.kube.client import load_configuration
from daemon.kube.credentials import CredentialError, ExecPlugin, TokenFile
from daemon.kube.errors import KubeError

REPO = Path(__file__).resolve().parents[2]

PLUGIN = """#!{python}
# An exec credential plugin: the token in {token_file}, valid for EXPIRES seconds; counts its runs in {runs_file}.
import datetime, json, os, sys
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
with open({runs_file!r}, "a") as f:
    f.write(json.dumps(info) + "\\n")
if os.environ.get("PLUGIN_FAIL"):
    print("no credentials: run `login` first", file=sys.stderr)
    sys.exit(3)
status = {{"token": open({token_file!r}).read().strip()}}
EXPIRES = {expires_s!r}
if EXPIRES is not None:
    at = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=EXPIRES)
    status["expirationTimestamp"] = at.strftime("%Y-%m-%dT%H:%M:%SZ")
print(json.dumps({{"apiVersion": info["apiVersion"], "kind": "ExecCredential", "status": status}}))
"""


def write_plugin(folder: Path, *, expires_s: int | None = 600) -> tuple[Path, Path, Path]:
    token_file, runs_file, script = folder / "token", folder / "runs.jsonl", folder / "plugin.py"
    token_file.write_text("token-one\n")
    script.write_text(
        PLUGIN.format(python=sys.executable, token_file=str(token_file), runs_file=str(runs_file), expires_s=expires_s)
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script, token_file, runs_file


def runs(runs_file: Path) -> int:
    return len(runs_file.read_text().splitlines()) if runs_file.exists() else 0


def write_kubeconfig(path: Path, user: dict[str, object], *, user_name: str = "deployer") -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "c", "cluster": {"server": "https://127.0.0.1:6443", "insecure-skip-tls-verify": True}}
                ],
                "users": [{"name": user_name, "user": user}],
                "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": user_name}}],
                "current-context": "ctx",
            }
        )
    )
    return path


def exec_user(script: Path | str, **extra: object) -> dict[str, object]:
    return {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": str(script),
            "args": ["--cluster", "c"],
            "interactiveMode": "Never",
            **extra,
        }
    }


async def test_an_exec_plugin_in_the_kubeconfig_gives_the_token_and_is_cached(tmp_path: Path) -> None:
    script, token_file, runs_file = write_plugin(tmp_path)
    cfg = await load_configuration(write_kubeconfig(tmp_path / "kubeconfig", exec_user(script)))
    assert cfg.host == "https://127.0.0.1:6443"
    assert await cfg.get_api_key_with_prefix("BearerToken") == "Bearer token-one"
    token_file.write_text("token-two\n")
    assert await cfg.get_api_key_with_prefix("BearerToken") == "Bearer token-one"  # valid for 10 minutes: cached
    assert runs(runs_file) == 1
    info = json.loads(runs_file.read_text().splitlines()[0])
    assert info == {
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "spec": {"interactive": False},
    }


async def test_the_plugin_runs_again_once_its_token_expired_and_after_a_401(tmp_path: Path) -> None:
    script, token_file, runs_file = write_plugin(tmp_path, expires_s=300)
    now = [dt.datetime.now(dt.UTC).timestamp()]
    plugin = ExecPlugin(
        exec_user(script)["exec"],  # type: ignore[arg-type]
        user="deployer",
        kubeconfig=tmp_path / "kubeconfig",
        clock=lambda: now[0],
    )
    cfg = await load_configuration(write_kubeconfig(tmp_path / "kubeconfig", {"token": "static"}))
    cfg.refresh_api_key_hook = plugin
    assert await cfg.get_api_key_with_prefix("BearerToken") == "Bearer token-one"
    token_file.write_text("token-two\n")
    now[0] += 290  # 10 s before expiry: still the cached one
    assert await cfg.get_api_key_with_prefix("BearerToken") == "Bearer token-one"
    assert runs(runs_file) == 1
    now[0] += 20  # expired
    assert await cfg.get_api_key_with_prefix("BearerToken") == "Bearer token-two"
    assert runs(runs_file) == 2
    token_file.write_text("token-three\n")
    assert plugin.invalidate() is True  # what the client does on a 401
    assert await cfg.get_api_key_with_prefix("BearerToken") == "Bearer token-three"
    assert runs(runs_file) == 3


async def test_a_plugin_without_expiry_is_run_once(tmp_path: Path) -> None:
    script, _, runs_file = write_plugin(tmp_path, expires_s=None)
    cfg = await load_configuration(write_kubeconfig(tmp_path / "kubeconfig", exec_user(script)))
    for _ in range(5):
        assert await cfg.get_api_key_with_prefix("BearerToken") == "Bearer token-one"
    assert runs(runs_file) == 1


async def test_a_relative_command_is_relative_to_the_kubeconfig_and_env_reaches_the_plugin(tmp_path: Path) -> None:
    folder = tmp_path / "conf"
    folder.mkdir()
    write_plugin(folder)
    runs_file = folder / "runs.jsonl"
    user = exec_user("./plugin.py", env=[{"name": "PLUGIN_FAIL", "value": ""}], provideClusterInfo=True)
    cfg = await load_configuration(write_kubeconfig(folder / "kubeconfig", user))
    assert await cfg.get_api_key_with_prefix("BearerToken") == "Bearer token-one"
    info = json.loads(runs_file.read_text().splitlines()[0])
    assert info["spec"]["cluster"] == {"server": "https://127.0.0.1:6443", "insecure-skip-tls-verify": True}


@pytest.mark.parametrize(
    ("output", "problem"),
    [
        pytest.param("not json", "did not write an ExecCredential (not JSON", id="not JSON"),
        pytest.param('{"apiVersion": "client.authentication.k8s.io/v1", "kind": "Other"}', "no kind", id="kind"),
        pytest.param(
            '{"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential", "status": {}}',
            "answered with apiVersion 'client.authentication.k8s.io/v1beta1'",
            id="apiVersion",
        ),
        pytest.param(
            '{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "status": {}}',
            "without status.token",
            id="no token",
        ),
        pytest.param(
            '{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "status": '
            '{"clientCertificateData": "x", "clientKeyData": "y"}}',
            "returned a client certificate",
            id="certificate",
        ),
        pytest.param(
            '{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "status": '
            '{"token": "t", "expirationTimestamp": "tomorrow"}}',
            "not an RFC 3339 time",
            id="bad expiry",
        ),
    ],
)
async def test_a_bad_answer_is_named(tmp_path: Path, output: str, problem: str) -> None:
    script = tmp_path / "plugin.py"
    script.write_text(f"#!{sys.executable}\nprint({output!r})\n")
    script.chmod(0o755)
    with pytest.raises(KubeError) as raised:
        await load_configuration(write_kubeconfig(tmp_path / "kubeconfig", exec_user(script)))
    text = str(raised.value)
    assert problem in text and str(tmp_path / "kubeconfig") in text and "'deployer'" in text, text


def test_a_failing_plugin_stops_admitd_run_with_one_line_naming_the_kubeconfig_user_and_command(
    tmp_path: Path,
) -> None:
    script, _, _ = write_plugin(tmp_path)
    kubeconfig = write_kubeconfig(
        tmp_path / "kubeconfig",
        exec_user(script, env=[{"name": "PLUGIN_FAIL", "value": "1"}]),
        user_name="ci-deployer",
    )
    done = subprocess.run(
        [
            str(REPO / ".venv" / "bin" / "admitd"),
            "run",
            "--kubeconfig",
            str(kubeconfig),
            "--db",
            str(tmp_path / "a.db"),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    # One line for the operator; the other lines are the same error as a structured log record ("cannot start").
    lines = [line for line in done.stderr.splitlines() if not line.startswith("{")]
    assert len(lines) == 1, done.stderr
    line = lines[0]
    assert line.startswith("admitd: CONFIG "), line
    for part in (str(kubeconfig), "user 'ci-deployer'", f"{script} --cluster c", "exit status 3", "run `login` first"):
        assert part in line, (part, line)


async def test_a_missing_plugin_and_an_interactive_one_are_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(KubeError, match=r"exec plugin '/nowhere/plugin --cluster c' cannot be started: No such file"):
        await load_configuration(write_kubeconfig(tmp_path / "k1", exec_user(Path("/nowhere/plugin"))))
    with pytest.raises(KubeError, match=r"interactiveMode Always"):
        await load_configuration(
            write_kubeconfig(tmp_path / "k2", exec_user(Path("/bin/true"), interactiveMode="Always"))
        )


async def test_a_token_file_is_re_read_after_a_minute_and_after_a_401(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("first\n")
    now = [1000.0]
    source = TokenFile(path, clock=lambda: now[0])
    cfg = await load_configuration(write_kubeconfig(tmp_path / "kubeconfig", {"token": "static"}))
    cfg.refresh_api_key_hook = source
    assert await cfg.get_api_key_with_prefix("BearerToken") == "Bearer first"
    path.write_text("second\n")  # the kubelet rotates the projected token
    now[0] += 59
    assert await cfg.get_api_key_with_prefix("BearerToken") == "Bearer first"
    now[0] += 1
    assert await cfg.get_api_key_with_prefix("BearerToken") == "Bearer second"
    path.write_text("third\n")
    source.invalidate()
    assert await cfg.get_api_key_with_prefix("BearerToken") == "Bearer third"
    assert source.reads == 3


async def test_a_kubeconfig_token_file_rotates_and_a_missing_one_is_named(tmp_path: Path) -> None:
    (tmp_path / "sa-token").write_text("from-file\n")
    cfg = await load_configuration(write_kubeconfig(tmp_path / "kubeconfig", {"tokenFile": "sa-token"}))
    assert await cfg.get_api_key_with_prefix("BearerToken") == "Bearer from-file"
    assert isinstance(cfg.refresh_api_key_hook, TokenFile)
    (tmp_path / "sa-token").unlink()
    cfg.refresh_api_key_hook.invalidate()
    with pytest.raises(CredentialError, match=r"sa-token: .*cannot read the token file"):
        await cfg.get_api_key_with_prefix("BearerToken")
