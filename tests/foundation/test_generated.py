"""Every committed generated file is what its generator writes today (`make generate`)."""

from __future__ import annotations

import pytest

from infra import REPO_ROOT
from infra.offline import regenerate
from observability.config import ObservabilityConfig
from observability.rules import alert_groups, project_group_names


@pytest.mark.parametrize("path", sorted(regenerate.generators()))
def test_committed_generated_file_is_current(path: str) -> None:
    target = REPO_ROOT / path
    assert target.is_file(), f"{path} is missing: run `make generate`"
    assert target.read_text(encoding="utf-8") == regenerate.generators()[path](), (
        f"{path} is stale: run `make generate`"
    )


def test_generate_rewrites_a_stale_file(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(regenerate, "REPO_ROOT", tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "runbooks.md").write_text("# old\n", encoding="utf-8")
    # a page written by hand around its generated list: only the list is rewritten
    stale = f"# Alerts\n\nBy hand.\n\n{regenerate.SECTION_START}\n- ml_storage\n{regenerate.SECTION_END}\n\nAfter.\n"
    (tmp_path / "docs" / "alerts.md").write_text(stale, encoding="utf-8")
    assert regenerate.main([]) == 0
    files = regenerate.generated_files()
    for path, text in files.items():
        assert (tmp_path / path).read_text(encoding="utf-8") == text
    alerts = files["docs/alerts.md"]
    assert alerts.startswith("# Alerts\n\nBy hand.\n\n") and alerts.endswith(f"{regenerate.SECTION_END}\n\nAfter.\n")
    assert "- ml_storage" not in alerts and "| `ml_storage` |" in alerts


def test_the_alert_groups_list_is_every_group_of_the_code() -> None:
    """docs/alerts.md lists every alert group and every alert, from the rules themselves."""
    text = (REPO_ROOT / "docs" / "alerts.md").read_text(encoding="utf-8")
    listed = text[text.index(regenerate.SECTION_START) : text.index(regenerate.SECTION_END)]
    groups = alert_groups(ObservabilityConfig())
    assert len(groups) >= 9
    for group, alerts in groups:
        assert f"| `{group}` |" in listed, group
        assert all(f"[{alert.name}](runbooks.md#{alert.name.lower()})" in listed for alert in alerts), group
    assert all(f"`{name}`" in listed for name in project_group_names(ObservabilityConfig()))


def test_a_page_without_its_markers_is_refused_by_name(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(regenerate, "REPO_ROOT", tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "alerts.md").write_text("# Alerts\n\nThe markers were deleted.\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"docs/alerts\.md: the generated list needs its markers"):
        regenerate.generators()["docs/alerts.md"]()
