"""Write a golden payload for every current (type, version) that has none yet. Never overwrites a fixture.

Run `python -m tests.golden.generate` after adding an event type or bumping a VERSION, and commit the new file.
"""

from __future__ import annotations

from pathlib import Path

from daemon.eventlog import codec
from tests.samples import one_of_each

HERE = Path(__file__).parent


def fixture_path(type_: str, version: int) -> Path:
    return HERE / f"{type_}@v{version}.json"


def main() -> None:
    for event in one_of_each():
        path = fixture_path(event.TYPE, event.VERSION)
        if not path.exists():
            path.write_bytes(codec.encode_payload(event) + b"\n")
            print(f"wrote {path.name}")


if __name__ == "__main__":
    main()
