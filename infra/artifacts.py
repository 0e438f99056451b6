"""Files the render writes besides the Kubernetes objects the program registers (rules, scrape
config, datasources, dashboards, the training Job template), built from the same Args and the
same generated content the components use."""

from __future__ import annotations

from infra.components.training_job import job_manifest, job_manifest_path
from infra.generated import generated, stack_datasources_yaml
from infra.program import component_args
from infra.result import dump_yaml
from infra.settings import Settings
from observability.scrape_config import scrape_config_yaml

RULES_PATH = "prometheus/rules.yaml"
SCRAPE_CONFIG_PATH = "prometheus/scrape-config.yaml"
DATASOURCES_PATH = "grafana/datasources.yaml"


def artifact_files(settings: Settings) -> dict[str, str]:
    """Relative path under rendered/<stack>/ -> file text."""
    cfg = settings.observability_config()
    gen = generated(cfg)
    args = component_args(settings)
    files = {
        RULES_PATH: gen.rules_yaml,
        SCRAPE_CONFIG_PATH: scrape_config_yaml(cfg, list(args.scrape_discovery.watched_namespaces)),
        DATASOURCES_PATH: stack_datasources_yaml(settings),
        job_manifest_path(args.training_job): dump_yaml(job_manifest(args.training_job)),
    }
    files.update({f"dashboards/{uid}.json": text for uid, text in gen.dashboards.items()})
    return files
