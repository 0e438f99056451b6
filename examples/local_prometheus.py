"""`python -m examples.local_prometheus DIR`: a Prometheus config for trying the stack on a laptop.

Writes `DIR/prometheus.yml` (scrapes the synthetic trainer and, if given, a GPU poller, with the
`namespace`, `pod` and `service` labels scrape discovery would set in the cluster) and
`DIR/rules.yml` (the project's alert and recording rules), then prints the command that starts
Prometheus on them. The intervals are shortened so alerts show within seconds.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

import yaml

from observability.config import ObservabilityConfig
from observability.rules import rules_file_yaml
from observability.scrape_config import EXEMPLAR_STORAGE_FEATURE

RULES_FILE = "rules.yml"


def static_job(name: str, address: str, namespace: str, pod: str, service: str, interval: int) -> dict[str, Any]:
    return {
        "job_name": name,
        "scrape_interval": f"{interval}s",
        "static_configs": [{"targets": [address], "labels": {"namespace": namespace, "pod": pod, "service": service}}],
    }


def prometheus_config(cfg: ObservabilityConfig, trainer: str, poller: str | None) -> dict[str, Any]:
    interval = cfg.scrape_interval_seconds
    service = cfg.training_job_service
    jobs = [static_job("synthetic-trainer", trainer, "training", "synthetic-trainer", service, interval)]
    if poller:
        jobs.append(static_job("gpu-poller", poller, "monitoring", "gpu-poller", cfg.gpu_poller_service, interval))
    return {
        "global": {"scrape_interval": f"{interval}s", "evaluation_interval": f"{cfg.evaluation_interval_seconds}s"},
        "rule_files": [RULES_FILE],
        "scrape_configs": jobs,
    }


def write(directory: Path, cfg: ObservabilityConfig, trainer: str, poller: str | None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / RULES_FILE).write_text(rules_file_yaml(cfg), encoding="utf-8")
    config = directory / "prometheus.yml"
    config.write_text(yaml.safe_dump(prometheus_config(cfg, trainer, poller), sort_keys=False), encoding="utf-8")
    return config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.local_prometheus", description=__doc__)
    parser.add_argument("directory", type=Path)
    parser.add_argument("--trainer", default="127.0.0.1:9094", help="the synthetic trainer's HOST:PORT")
    parser.add_argument("--poller", default=None, help="a GPU poller's HOST:PORT (optional)")
    parser.add_argument("--interval", type=int, default=5, help="scrape and evaluation interval in seconds")
    args = parser.parse_args(argv)
    cfg = ObservabilityConfig(scrape_interval_seconds=args.interval, evaluation_interval_seconds=args.interval)
    config = write(args.directory, cfg, args.trainer, args.poller)
    data = args.directory / "data"
    print(
        f"prometheus --config.file={shlex.quote(str(config))} --enable-feature={EXEMPLAR_STORAGE_FEATURE} "
        f"--storage.tsdb.path={shlex.quote(str(data))} --web.listen-address=127.0.0.1:9090"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
