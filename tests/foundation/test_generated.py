"""Every committed generated file is what its generator writes today (`make generate`)."""

from __future__ import annotations

import pytest

from infra import REPO_ROOT
from infra.offline import regenerate


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
    assert regenerate.main([]) == 0
    files = regenerate.generated_files()
    for path, text in files.items():
        assert (tmp_path / path).read_text(encoding="utf-8") == text
