"""admitd's settings read from a Kueue Configuration document.

Real: the parser in daemon.manifests.config. Faked: nothing; documents are dicts written here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon.manifests import ManifestError
from daemon.manifests.config import load_config, parse_config

V1B1 = "config.kueue.x-k8s.io/v1beta1"
V1B2 = "config.kueue.x-k8s.io/v1beta2"


@pytest.mark.parametrize(
    ("doc", "fair"),
    [
        ({"apiVersion": V1B1, "kind": "Configuration"}, False),
        ({"apiVersion": V1B1, "kind": "Configuration", "fairSharing": {"enable": True}}, True),
        ({"apiVersion": V1B1, "kind": "Configuration", "fairSharing": {"enable": False}}, False),
        ({"apiVersion": V1B1, "kind": "Configuration", "fairSharing": {}}, False),
        ({"apiVersion": V1B2, "kind": "Configuration", "fairSharing": {}}, True),
        ({"apiVersion": V1B2, "kind": "Configuration", "fairSharing": {"enable": False}}, False),
        ({"apiVersion": V1B2, "kind": "Configuration"}, False),
    ],
    ids=[
        "v1beta1-without-a-section-is-off",
        "v1beta1-enable-true-is-on",
        "v1beta1-enable-false-is-off",
        "v1beta1-empty-section-is-off",
        "v1beta2-a-section-switches-it-on",
        "v1beta2-enable-false-still-wins",
        "v1beta2-without-a-section-is-off",
    ],
)
def test_fair_sharing_is_switched_as_kueue_switches_it(doc: dict[str, object], fair: bool) -> None:
    config, warnings = parse_config(doc)
    assert config.fair_sharing is fair
    assert warnings == ()


def test_kueue_settings_admitd_does_not_implement_are_named_not_dropped() -> None:
    _, warnings = parse_config(
        {
            "apiVersion": V1B1,
            "kind": "Configuration",
            "fairSharing": {"enable": True, "preemptionStrategies": ["LessThanInitialShare"]},
            "integrations": {"frameworks": ["batch/job"]},
        },
        "kueue.yaml",
    )
    assert warnings == ("kueue.yaml: integrations is a Kueue setting admitd does not implement; ignored",)


@pytest.mark.parametrize(
    ("strategies", "expected"),
    [
        (None, ("LessThanOrEqualToFinalShare", "LessThanInitialShare")),
        (["LessThanInitialShare"], ("LessThanInitialShare",)),
        (["LessThanOrEqualToFinalShare"], ("LessThanOrEqualToFinalShare",)),
        (
            ["LessThanOrEqualToFinalShare", "LessThanInitialShare"],
            ("LessThanOrEqualToFinalShare", "LessThanInitialShare"),
        ),
    ],
    ids=["default", "S2-b only", "S2-a only", "both in Kueue's order"],
)
def test_preemption_strategies_reach_the_engine_in_the_order_given(
    strategies: list[str] | None, expected: tuple[str, ...]
) -> None:
    section: dict[str, object] = {"enable": True}
    if strategies is not None:
        section["preemptionStrategies"] = strategies
    config, warnings = parse_config({"apiVersion": V1B1, "kind": "Configuration", "fairSharing": section})
    assert (config.fair_sharing_strategies, warnings) == (expected, ())


@pytest.mark.parametrize(
    ("doc", "field", "message"),
    [
        ({"apiVersion": V1B1, "kind": "ClusterQueue"}, "kind", "must be Configuration"),
        ({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Configuration"}, "apiVersion", "must be one of"),
        ({"apiVersion": V1B1, "kind": "Configuration", "fairSharing": "yes"}, "fairSharing", "must be a mapping"),
        (
            {"apiVersion": V1B1, "kind": "Configuration", "fairSharing": {"enable": "yes"}},
            "fairSharing.enable",
            "must be true or false",
        ),
        (
            {"apiVersion": V1B1, "kind": "Configuration", "fairSharing": {"preemptionStrategies": ["Fastest"]}},
            "fairSharing.preemptionStrategies",
            "unknown strategy 'Fastest'",
        ),
        (
            {
                "apiVersion": V1B1,
                "kind": "Configuration",
                "fairSharing": {"preemptionStrategies": ["LessThanInitialShare", "LessThanOrEqualToFinalShare"]},
            },
            "fairSharing.preemptionStrategies",
            "is not one of the lists Kueue accepts",
        ),
    ],
    ids=[
        "wrong-kind",
        "wrong-group",
        "section-not-a-mapping",
        "enable-not-a-bool",
        "unknown-strategy",
        "strategies-in-an-order-kueue-rejects",
    ],
)
def test_bad_configuration_names_the_field(doc: dict[str, object], field: str, message: str) -> None:
    with pytest.raises(ManifestError) as info:
        parse_config(doc, "admitd.yaml")
    assert info.value.field == field
    assert message in str(info.value)
    assert str(info.value).startswith("admitd.yaml: ")


def test_the_shipped_configurations_load() -> None:
    root = Path(__file__).resolve().parents[2] / "config"
    assert load_config(root / "admitd.yaml") == (load_config(root / "admitd.yaml")[0], ())
    assert load_config(root / "admitd.yaml")[0].fair_sharing is False
    assert load_config(root / "admitd-fair-sharing.yaml")[0].fair_sharing is True


def test_a_multi_document_file_is_one_line_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("kind: Configuration\n---\nkind: Configuration\n")
    with pytest.raises(ManifestError) as info:
        load_config(path)
    assert "\n" not in str(info.value)
    assert str(info.value).startswith(f"{path}:2: ")  # the second document starts at its "---"


@pytest.mark.parametrize(
    ("section", "on"),
    [(None, False), ({"enable": True}, True), ({"enable": False}, False), ({}, False)],
    ids=["no-section-is-off", "enable-true-is-on", "enable-false-is-off", "empty-section-is-off"],
)
def test_the_web_view_is_switched_by_webui_enable(section: dict[str, object] | None, on: bool) -> None:
    doc: dict[str, object] = {"apiVersion": V1B1, "kind": "Configuration"}
    if section is not None:
        doc["webUI"] = section
    config, warnings = parse_config(doc, "admitd.yaml")
    assert config.web_ui is on
    assert warnings == ()


@pytest.mark.parametrize(
    ("section", "field", "message"),
    [("yes", "webUI", "must be a mapping"), ({"enable": "yes"}, "webUI.enable", "must be true or false")],
    ids=["section-not-a-mapping", "enable-not-a-bool"],
)
def test_a_bad_webui_section_names_the_field(section: object, field: str, message: str) -> None:
    with pytest.raises(ManifestError) as info:
        parse_config({"apiVersion": V1B2, "kind": "Configuration", "webUI": section}, "admitd.yaml")
    assert info.value.field == field
    assert message in str(info.value)


def test_an_unknown_webui_setting_is_named_not_dropped() -> None:
    config, warnings = parse_config(
        {"apiVersion": V1B1, "kind": "Configuration", "webUI": {"enable": True, "port": 9}}, "admitd.yaml"
    )
    assert config.web_ui is True
    assert warnings == ("admitd.yaml: webUI.port is not a setting of admitd's web view; ignored",)


def test_admitd_run_serves_the_web_view_when_the_flag_or_the_key_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`admitd run --ui` and `webUI.enable: true` in its --config agree: either turns the view on."""
    import argparse  # noqa: PLC0415

    from daemon.kube import cli as kube_cli  # noqa: PLC0415
    from daemon.kube import run as kube_run  # noqa: PLC0415

    seen: list[bool] = []

    async def fake_run(options: object) -> int:
        seen.append(bool(getattr(options, "ui")))  # noqa: B009
        return 0

    monkeypatch.setattr(kube_run, "run_daemon", fake_run)
    on = tmp_path / "on.yaml"
    on.write_text(f"apiVersion: {V1B1}\nkind: Configuration\nwebUI:\n  enable: true\n")
    off = tmp_path / "off.yaml"
    off.write_text(f"apiVersion: {V1B1}\nkind: Configuration\n")
    for config, flag in ((off, False), (off, True), (on, False), (on, True)):
        parser = argparse.ArgumentParser()
        sub = parser.add_subparsers()
        kube_cli.add_run_parser(sub, db_default=tmp_path / "a.db", db_help="")
        args = parser.parse_args(["run", "--config", str(config), *(["--ui"] if flag else [])])
        assert args.func(args) == 0
    assert seen == [False, True, True, True]


def test_ui_past_memory_reaches_the_daemons_timeline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`admitd run --ui-past-memory MIB`: the budget of the web view's timeline (default the web view's own)."""
    import argparse  # noqa: PLC0415

    from daemon.kube import cli as kube_cli  # noqa: PLC0415
    from daemon.kube import run as kube_run  # noqa: PLC0415
    from daemon.web.server import DAEMON_PAST_BUDGET_BYTES  # noqa: PLC0415

    seen: list[int] = []

    async def fake_run(options: kube_run.RunOptions) -> int:
        seen.append(kube_run._ui_timeline(options.ui_past_bytes).budget_bytes)
        return 0

    monkeypatch.setattr(kube_run, "run_daemon", fake_run)
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    kube_cli.add_run_parser(sub, db_default=tmp_path / "a.db", db_help="")
    for extra in ([], ["--ui-past-memory", "300"]):
        args = parser.parse_args(["run", "--ui", *extra])
        assert args.func(args) == 0
    assert seen == [DAEMON_PAST_BUDGET_BYTES, 300 * 2**20]
    with pytest.raises(SystemExit):
        parser.parse_args(["run", "--ui-past-memory", "0"])
