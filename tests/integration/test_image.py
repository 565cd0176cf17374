"""admitd's OCI image, built by scripts/build-image with no container engine, run as a container.

Real: the image is the one scripts/build-image writes to build/image/admitd.oci.tar. The script keeps each build
under ~/.cache/admitd/image by the stamp of its inputs (requirements.lock, pyproject.toml, daemon/, migrations/,
the Containerfile, the script), so a run whose inputs did not change (a fresh clone in CI included) copies the
archive in seconds, and only a change to one of them costs a build (about 2 minutes here, bench/RESULTS.md).

It runs under two runners, each made to give the container what Kubernetes gives the Deployment's pod: user 65532
(the image's), a read-only root filesystem, one writable volume at /var/lib/admitd, the host's network (the local
control plane listens on 127.0.0.1):
- podman (Debian's), rootful, `--network host --read-only --cap-drop all`. On these machines only runc starts
  containers (crun refuses the hybrid cgroup v1/v2 layout) and only with rlimits no higher than this process's
  (there is no CAP_SYS_RESOURCE), so the runner asks for those. Skipped, saying why, where podman is not installed
  or starts no container.
- chroot, for where no container runtime works: `umoci unpack` turns the image into a runtime bundle, and its
  entrypoint is run exactly as the bundle's config.json says (args, environment, working directory, uid and gid
  65532) by chroot(8) under `unshare --mount`: the root bind-mounted read-only, a tmpfs /dev with null, zero,
  random and urandom, /proc, a tmpfs /tmp, the volume bound at /var/lib/admitd. No namespaces but the mount one:
  it shares the host's network and PIDs (so SIGTERM reaches the daemon itself). Needs root, as CI has.

Each runner runs `admitd --version` (the image's label revision), `admitd simulate` on config/samples/seed.yaml (the
same table as this checkout's simulator), and `admitd run` against the local control plane, which admits a Job,
shows `admitd_build_info` on /metrics and drains on SIGTERM with exit status 0.
"""

from __future__ import annotations

import base64
import gzip
import io
import json
import os
import re
import resource
import shlex
import shutil
import subprocess
import sys
import tarfile
import tomllib
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest
import yaml

from tests.integration.conftest import REPO, KubeCluster
from tests.integration.daemon_harness import apply, free_port, install_crds, job, kubectl, wait_for
from tests.integration.test_daemon import cluster_queue, flavor, local_queue, running

BUILD = REPO / "scripts" / "build-image"
ARCHIVE = REPO / "build" / "image" / "admitd.oci.tar"
CONTAINERFILE = REPO / "Containerfile"
UID = 65532
VOLUME = "/var/lib/admitd"
BUILD_TIMEOUT = 1200  # a cold build is about 2 minutes here; the Debian mirror and PyPI can be slow

# Every test that builds or runs the image is in the cluster layer too (`-m "not cluster"` stays fast): the first
# build on a machine takes minutes.
pytestmark = [
    pytest.mark.image,
    pytest.mark.timeout(BUILD_TIMEOUT + 300),  # the first test in a session may wait for the build
    pytest.mark.skipif(os.geteuid() != 0, reason="scripts/build-image and the chroot runner need root"),
]


@dataclass(frozen=True)
class Image:
    archive: Path
    digest: str
    config: dict[str, Any]  # the OCI image configuration

    @property
    def labels(self) -> dict[str, str]:
        labels: dict[str, str] = self.config["config"]["Labels"]
        return labels


@pytest.fixture(scope="session")
def image() -> Image:
    out = subprocess.run([str(BUILD)], capture_output=True, text=True, check=False, timeout=BUILD_TIMEOUT, cwd=REPO)
    assert out.returncode == 0, f"scripts/build-image failed: {out.stderr[-3000:]}"
    digest = (ARCHIVE.parent / "digest").read_text().strip()
    config = json.loads(
        subprocess.run(
            ["skopeo", "inspect", "--config", f"oci-archive:{ARCHIVE}"], capture_output=True, check=True, timeout=120
        ).stdout
    )
    return Image(ARCHIVE, digest, config)


# --- the Containerfile and the script agree ---------------------------------------------------------------------


def _containerfile_final_stage() -> dict[str, Any]:
    """The Containerfile's instructions after its last FROM, continuation lines joined; ARG defaults of the file."""
    text = re.sub(r"\\\n\s*", " ", CONTAINERFILE.read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    args: dict[str, str] = {}
    froms = []
    for line in lines:
        word, _, rest = line.partition(" ")
        if word == "ARG" and "=" in rest:
            name, _, default = rest.partition("=")
            args.setdefault(name, default)
        if word == "FROM":
            froms.append(rest)
    last = max(i for i, line in enumerate(lines) if line.startswith("FROM "))
    stage: dict[str, Any] = {"args": args, "froms": froms, "run": [x for x in lines if x.startswith("RUN ")]}
    for line in lines[last + 1 :]:
        word, _, rest = line.partition(" ")
        if word in ("USER", "WORKDIR", "VOLUME"):
            stage[word] = rest
        elif word == "ENTRYPOINT":
            stage[word] = json.loads(rest)
        elif word == "ENV":
            stage[word] = dict(pair.split("=", 1) for pair in shlex.split(rest))
        elif word == "LABEL":
            stage.setdefault(word, {}).update(dict(pair.split("=", 1) for pair in shlex.split(rest)))
    return stage


def _substitute(value: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], value)


@pytest.mark.cluster
def test_the_containerfile_builds_the_same_image_as_the_script(image: Image) -> None:
    """Same base (the script's recipe on the same Debian suite), user, entrypoint, environment, volume and labels."""
    stage = _containerfile_final_stage()
    config = image.config["config"]
    script = BUILD.read_text()
    suite = re.search(r"^SUITE=\$\{DEBIAN_SUITE:-(\w+)\}", script, re.M)
    assert suite is not None
    assert stage["args"]["DEBIAN_SUITE"] == suite.group(1)
    assert stage["froms"] == ["docker.io/library/debian:${DEBIAN_SUITE} AS build", "scratch"]
    assert any("scripts/build-image --layers-only /layers" in run for run in stage["run"])
    assert stage["USER"] == config["User"] == f"{UID}:{UID}"
    assert stage["ENTRYPOINT"] == config["Entrypoint"] == ["/usr/local/bin/admitd"]
    assert stage["WORKDIR"] == config["WorkingDir"] == VOLUME
    assert stage["VOLUME"] == VOLUME and set(config["Volumes"]) == {VOLUME}
    assert stage["ENV"] == dict(e.split("=", 1) for e in config["Env"])
    assert stage["LABEL"].keys() == image.labels.keys()
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert image.labels["org.opencontainers.image.version"] == version == stage["args"]["VERSION"]
    for key, value in stage["LABEL"].items():  # the values that are not build arguments are equal too
        if key.rsplit(".", 1)[1] not in ("revision", "source", "created"):
            assert _substitute(value, stage["args"]) == image.labels[key], key
    assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?", image.labels["org.opencontainers.image.revision"])


@pytest.mark.cluster
def test_the_layers_are_whole_tars_of_one_time_with_no_shell_and_nothing_setuid(image: Image) -> None:
    """Every layer reads to its end as a tar (strict readers refuse a cut one), every entry has the image's one
    time (SOURCE_DATE_EPOCH, the config's `created`), owners are root or 65532, there are no device nodes, no
    setuid or setgid files and no shell; /var/lib/admitd and /home/nonroot belong to 65532."""
    created = image.config["created"]
    epoch = int(subprocess.run(["date", "-u", "-d", created, "+%s"], capture_output=True, text=True, check=True).stdout)
    entries: dict[str, tarfile.TarInfo] = {}
    with tarfile.open(image.archive) as outer:
        index = json.load(_member(outer, "index.json"))
        assert index["manifests"][0]["digest"] == image.digest  # build/image/digest names this manifest
        manifest = json.load(_member(outer, "blobs/" + index["manifests"][0]["digest"].replace(":", "/")))
        assert len(manifest["layers"]) == 2
        for layer in manifest["layers"]:
            data = gzip.decompress(_member(outer, "blobs/" + layer["digest"].replace(":", "/")).read())
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as inner:
                for member in inner:  # a cut archive raises ReadError here
                    entries[member.name.removeprefix("./").rstrip("/")] = member
    assert {m.mtime for m in entries.values()} == {epoch}
    assert {(m.uid, m.gid) for m in entries.values()} <= {(0, 0), (UID, UID)}
    assert [n for n, m in entries.items() if m.ischr() or m.isblk() or m.isfifo()] == []
    assert [n for n, m in entries.items() if m.mode & 0o6000] == []
    shells = {"bin/sh", "bin/bash", "bin/dash", "usr/bin/sh", "usr/bin/bash", "usr/bin/dash", "usr/bin/busybox"}
    assert shells & entries.keys() == set()
    for path in ("var/lib/admitd", "home/nonroot"):
        assert (entries[path].uid, entries[path].gid) == (UID, UID), path
    assert entries["usr/local/bin/admitd"].mode & 0o111
    assert "usr/local/lib/python3.11/dist-packages/daemon/BUILD_COMMIT" in entries
    assert "usr/share/admitd/migrations/0001_event_log.sql" in entries


def _member(archive: tarfile.TarFile, name: str) -> IO[bytes]:
    f = archive.extractfile(name)
    assert f is not None, name
    return f


# --- runners ----------------------------------------------------------------------------------------------------


class Runner:
    name: str

    def argv(self, args: list[str], volume: Path | None, command: list[str] | None = None) -> list[str]:
        """The command that runs the image's entrypoint (or `command`, as a pod's `command:` replaces it) with
        `args`, `volume` mounted at /var/lib/admitd."""
        raise NotImplementedError

    def cleanup(self) -> None:
        pass


class Podman(Runner):
    name = "podman"

    def __init__(self, image: Image) -> None:
        soft_files, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        self.global_args = ["--runtime", "runc"] if shutil.which("runc") else []
        self.limits = ["--ulimit", f"nofile={soft_files}:{soft_files}", "--ulimit", "nproc=4096:4096"]
        self.names: list[str] = []
        loaded = self._podman("load", "-q", "-i", str(image.archive))
        if loaded.returncode != 0:
            pytest.skip(f"podman cannot load the image: {loaded.stderr.strip()[-500:]}")
        self.image = _config_id(image.archive)  # the image podman loaded, by its ID
        probe = subprocess.run(self.argv(["--version"], None), capture_output=True, text=True, check=False, timeout=120)
        if probe.returncode != 0:
            pytest.skip(f"podman starts no container here: {probe.stderr.strip()[-500:]}")

    def _podman(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["podman", *self.global_args, *args], capture_output=True, text=True, check=False, timeout=300
        )

    def argv(self, args: list[str], volume: Path | None, command: list[str] | None = None) -> list[str]:
        name = f"admitd-test-{uuid.uuid4().hex[:8]}"
        self.names.append(name)
        mount = [] if volume is None else ["-v", f"{volume}:{VOLUME}"]
        if command is not None:
            mount += ["--entrypoint", json.dumps(command)]
        return [
            "podman",
            *self.global_args,
            "run",
            "--rm",
            "--name",
            name,
            "--network",
            "host",
            "--read-only",
            "--cap-drop",
            "all",
            "--security-opt",
            "no-new-privileges",
            *self.limits,
            *mount,
            self.image,
            *args,
        ]

    def cleanup(self) -> None:
        for name in self.names:
            self._podman("rm", "-f", "--ignore", name)
        self._podman("rmi", "--force", "--ignore", self.image)  # podman's storage keeps no image of each build


def _config_id(archive: Path) -> str:
    manifest = json.loads(
        subprocess.run(
            ["skopeo", "inspect", "--raw", f"oci-archive:{archive}"], capture_output=True, check=True, timeout=120
        ).stdout
    )
    return str(manifest["config"]["digest"]).removeprefix("sha256:")


class Chroot(Runner):
    name = "chroot"

    def __init__(self, image: Image, where: Path) -> None:
        layout, bundle = where / "layout", where / "bundle"
        subprocess.run(
            ["skopeo", "copy", "-q", f"oci-archive:{image.archive}", f"oci:{layout}:admitd"], check=True, timeout=300
        )
        subprocess.run(
            ["umoci", "unpack", "--image", f"{layout}:admitd", str(bundle)],
            check=True,
            capture_output=True,
            timeout=300,
        )
        process = json.loads((bundle / "config.json").read_text())["process"]
        self.rootfs = bundle / "rootfs"
        self.entry: list[str] = process["args"]
        self.env: list[str] = process["env"]
        self.cwd: str = process["cwd"]
        self.user = f"{process['user']['uid']}:{process['user']['gid']}"
        chroot = shutil.which("chroot")
        assert chroot is not None
        self.chroot = chroot

    def argv(self, args: list[str], volume: Path | None, command: list[str] | None = None) -> list[str]:
        r = shlex.quote(str(self.rootfs))
        mounts = [
            f"mount --bind {r} {r}",
            f"mount -o remount,bind,ro {r}",
            f"mount -t tmpfs -o mode=755,nosuid tmpfs {r}/dev",
            *(f"touch {r}/dev/{d} && mount --bind /dev/{d} {r}/dev/{d}" for d in ("null", "zero", "random", "urandom")),
            f"mount -t proc proc {r}/proc",
            f"mount -t tmpfs -o mode=1777,nosuid tmpfs {r}/tmp",
        ]
        if volume is not None:
            mounts.append(f"mount --bind {shlex.quote(str(volume))} {r}{VOLUME}")
        # chroot(8) changes to / in the new root; the bundle's cwd is the volume, which every command here can use
        # as given, so the entrypoint runs with absolute paths only.
        entry = self.entry if command is None else command  # a bare name is found on the image's PATH
        run = ["env", "-i", *self.env, self.chroot, f"--userspec={self.user}", str(self.rootfs), *entry, *args]
        script = " && ".join([*mounts, "exec " + shlex.join(run)])
        return ["unshare", "--mount", "--propagation", "private", "/bin/sh", "-ec", script]


@pytest.fixture(scope="module", params=["podman", "chroot"])
def runner(request: pytest.FixtureRequest, image: Image, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runner]:
    if request.param == "podman":
        if shutil.which("podman") is None:
            pytest.skip("podman is not installed (Debian's podman package); the chroot runner runs the image")
        r: Runner = Podman(image)
    else:
        r = Chroot(image, tmp_path_factory.mktemp("unpacked"))
    try:
        yield r
    finally:
        r.cleanup()


def volume(tmp_path: Path) -> Path:
    """A directory the image's user may write, mounted at /var/lib/admitd."""
    v = tmp_path / "volume"
    v.mkdir()
    os.chown(v, UID, UID)
    return v


@pytest.mark.cluster
def test_admitd_version_names_the_images_revision(runner: Runner, image: Image, tmp_path: Path) -> None:
    out = subprocess.run(
        runner.argv(["--version"], volume(tmp_path)), capture_output=True, text=True, check=False, timeout=120
    )
    assert out.returncode == 0, out.stderr
    revision = image.labels["org.opencontainers.image.revision"]
    version = image.labels["org.opencontainers.image.version"]
    assert re.fullmatch(rf"admitd {re.escape(version)} \(commit {revision}, Python 3\.11\.\d+\)", out.stdout.strip())


@pytest.mark.cluster
def test_the_deployments_command_is_found_in_the_image(runner: Runner, tmp_path: Path) -> None:
    """config/manager/deployment.yaml replaces the entrypoint with its `command:`, found on the image's PATH."""
    deployment = yaml.safe_load((REPO / "config" / "manager" / "deployment.yaml").read_text())
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    command = container.get("command")
    if command is None:
        pytest.skip("the Deployment uses the image's entrypoint (the other tests run it)")
    out = subprocess.run(
        runner.argv(["--version"], volume(tmp_path), command), capture_output=True, text=True, check=False, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("admitd "), out.stdout


def _table(stdout: str) -> list[str]:
    """simulate's table and summary, without the line of wall-clock timings."""
    return [line for line in stdout.splitlines() if not line.startswith("engine:")]


@pytest.mark.cluster
def test_admitd_simulate_on_the_seed_gives_the_checkouts_table(runner: Runner, tmp_path: Path) -> None:
    v = volume(tmp_path)
    shutil.copy(REPO / "config" / "samples" / "seed.yaml", v / "seed.yaml")
    out = subprocess.run(
        runner.argv(["simulate", f"{VOLUME}/seed.yaml"], v), capture_output=True, text=True, check=False, timeout=300
    )
    assert out.returncode == 0, out.stderr
    here = subprocess.run(
        [sys.executable, "-m", "daemon.cli", "simulate", str(v / "seed.yaml")],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
        cwd=REPO,
    )
    assert "research/pretrain-a" in out.stdout
    assert _table(out.stdout) == _table(here.stdout)


def _inline_kubeconfig(cluster: KubeCluster) -> str:
    """The admin kubeconfig with its certificate files inlined: the container sees none of the host's files."""
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    for entry, fields in (("clusters", ("certificate-authority",)), ("users", ("client-certificate", "client-key"))):
        for item in config[entry]:
            body = item["cluster" if entry == "clusters" else "user"]
            for f in fields:
                if f in body:
                    body[f + "-data"] = base64.b64encode(Path(body.pop(f)).read_bytes()).decode()
    return yaml.safe_dump(config)


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, ""
    except (urllib.error.URLError, OSError):
        return 0, ""


@pytest.mark.cluster
def test_admitd_run_in_the_image_admits_a_job_on_the_local_control_plane(
    runner: Runner, image: Image, kube_cluster: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    install_crds(kube_cluster)
    v = volume(tmp_path)
    (v / "kubeconfig").write_text(_inline_kubeconfig(kube_cluster))
    os.chown(v / "kubeconfig", UID, UID)
    webhook, health = free_port(), free_port()
    args = [
        "--log-level",
        "info",
        "run",
        "--kubeconfig",
        f"{VOLUME}/kubeconfig",
        "--db",
        f"{VOLUME}/admitd.db",
        "--cert-dir",
        f"{VOLUME}/certs",
        "--webhook-host",
        "127.0.0.1",
        "--webhook-port",
        str(webhook),
        "--webhook-url",
        f"https://127.0.0.1:{webhook}",
        "--health-host",
        "127.0.0.1",
        "--health-port",
        str(health),
        "--create-webhook-configurations",  # outside the cluster: config/ is not applied here
        "--leader-election-lease",  # one daemon per cluster: a Lease of this test's own (the namespace exists)
        f"default/admitd-image-{namespace}",
    ]
    log = tmp_path / "daemon.log"
    ns = namespace
    with log.open("wb") as err:
        proc = subprocess.Popen(runner.argv(args, v), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
    try:

        def ready() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"admitd run exited with {proc.returncode}: {log.read_text()[-3000:]}")
            return _get(f"http://127.0.0.1:{health}/readyz")[0] == 200

        wait_for("admitd run in the image to be ready", ready, timeout=120)
        apply(kube_cluster, flavor(f"h100-{ns}", **{"gpu-type": "h100"}), cluster_queue(f"cq-{ns}", f"h100-{ns}", 4))
        apply(kube_cluster, local_queue(ns, "q", f"cq-{ns}"), job(ns, "fits", queue="q", gpus=4, runtime="1h"))
        wait_for("the Job to be admitted by the image's daemon", lambda: running(kube_cluster, ns, "fits"), timeout=90)
        status, metrics = _get(f"http://127.0.0.1:{health}/metrics")
        assert status == 200
        revision = image.labels["org.opencontainers.image.revision"]
        version = image.labels["org.opencontainers.image.version"]
        info = [line for line in metrics.splitlines() if line.startswith("admitd_build_info{")]
        assert len(info) == 1, info
        assert f'commit="{revision}"' in info[0] and f'version="{version}"' in info[0], info
        assert re.search(r'python="3\.11\.\d+"', info[0]) and info[0].endswith(" 1.0"), info
        proc.terminate()
        assert proc.wait(timeout=60) == 0, log.read_text()[-3000:]
        assert (v / "admitd.db").stat().st_uid == UID  # written by the image's user, on the volume
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        kubectl(
            kube_cluster,
            "delete",
            "mutatingwebhookconfiguration,validatingwebhookconfiguration",
            "admitd",
            "--ignore-not-found",
        )
        kubectl(kube_cluster, "delete", "clusterqueue", f"cq-{ns}", "--ignore-not-found", "--wait=false")
        kubectl(kube_cluster, "delete", "resourceflavor", f"h100-{ns}", "--ignore-not-found", "--wait=false")


# --- bad input --------------------------------------------------------------------------------------------------


def test_a_machine_without_the_debian_tools_gets_one_line_naming_the_tool(tmp_path: Path) -> None:
    """No mmdebstrap, umoci, skopeo on PATH and no installing them: one line, naming the first missing tool and the
    packages to install. The check runs before anything else, with shell built-ins only."""
    bin_dir = tmp_path / "bin"  # every tool the script checks for but Debian's three image tools
    bin_dir.mkdir()
    for tool in ("dpkg-deb", "git", "sha256sum", "chroot", "find", "tar"):
        found = shutil.which(tool)
        assert found is not None, tool
        (bin_dir / tool).symlink_to(found)
    bash = shutil.which("bash")
    assert bash is not None
    out = subprocess.run(
        [bash, str(BUILD)],
        env={"PATH": str(bin_dir), "BUILD_IMAGE_INSTALL": "no", "HOME": str(tmp_path)},
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("build-image: mmdebstrap not found"), lines[0]
    assert "umoci" in lines[0] and "(apt-get install mmdebstrap umoci skopeo)" in lines[0], lines[0]
    assert not (tmp_path / "build").exists()
