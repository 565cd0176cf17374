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
