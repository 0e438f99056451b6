"""The Pulumi program, in one direction: typed settings (`infra.settings`) -> components
(`infra.components`) -> the content generated once per config (`infra.generated_content`) -> the
program (`infra.program`, run by `infra/__main__.py`). The offline tooling around it (render,
checks, schema check, review diff, regenerate, mock engine) is `infra.offline`, never deployed."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
