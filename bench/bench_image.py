"""The OCI image's build times and sizes, and whether two builds of the same inputs give one digest.

Cold: `scripts/build-image --force` (mmdebstrap downloads and extracts Debian's packages, pip installs the lock's
runtime dependencies from its cache or PyPI, the image's Python byte-compiles, umoci and skopeo assemble). Warm:
`scripts/build-image` with the stamp unchanged (the kept build is copied). Sizes: the OCI archive, each layer
compressed (the manifest's sizes, what a registry stores and a node pulls) and unpacked (the tar members' bytes).

    sudo .venv/bin/python -m bench.bench_image --cold 2 --warm 5 > bench/out/image.json

One JSON object on stdout; progress on stderr. Needs root, as scripts/build-image does.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "build" / "image"


def build(force: bool) -> float:
    argv = [str(REPO / "scripts" / "build-image"), *(["--force"] if force else [])]
    started = time.perf_counter()
    subprocess.run(argv, check=True, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def sizes(archive: Path) -> dict[str, Any]:
    with tarfile.open(archive) as outer:
        index = json.load(outer.extractfile("index.json"))  # type: ignore[arg-type]
        manifest_digest = index["manifests"][0]["digest"]
        blob = f"blobs/{manifest_digest.replace(':', '/')}"
        manifest = json.load(outer.extractfile(blob))  # type: ignore[arg-type]
        layers = []
        for layer in manifest["layers"]:
            member = outer.extractfile(f"blobs/{layer['digest'].replace(':', '/')}")
            assert member is not None
            with gzip.open(member) as raw, tarfile.open(fileobj=raw, mode="r|") as inner:
                unpacked = sum(m.size for m in inner if m.isfile())
            layers.append({"compressed_bytes": layer["size"], "unpacked_bytes": unpacked})
    return {
        "archive_bytes": archive.stat().st_size,
        "digest": manifest_digest,
        "layers": layers,
        "compressed_bytes": sum(x["compressed_bytes"] for x in layers),
        "unpacked_bytes": sum(x["unpacked_bytes"] for x in layers),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cold", type=int, default=2, help="full builds (--force)")
    parser.add_argument("--warm", type=int, default=5, help="builds with the stamp unchanged")
    args = parser.parse_args()
    cold, digests = [], []
    for i in range(args.cold):
        cold.append(build(force=True))
        digests.append((OUT / "digest").read_text().strip())
        print(f"cold build {i + 1}: {cold[-1]:.1f} s, {digests[-1]}", file=sys.stderr)
    warm = []
    for i in range(args.warm):
        warm.append(build(force=False))
        print(f"warm build {i + 1}: {warm[-1]:.2f} s", file=sys.stderr)
    result = {
        "cold_seconds": cold,
        "cold_median_seconds": statistics.median(cold) if cold else None,
        "warm_seconds": warm,
        "warm_median_seconds": statistics.median(warm) if warm else None,
        "cold_digests": digests,
        "reproducible": len(set(digests)) == 1 if digests else None,
        "packages": (OUT / "packages.txt").read_text().count("\n"),
        "build_info": (OUT / "build-info").read_text().splitlines(),
        **sizes(OUT / "admitd.oci.tar"),
    }
    json.dump(result, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
