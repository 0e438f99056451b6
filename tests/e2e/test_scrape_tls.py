"""A real Prometheus 2.42 scrapes the GPU poller (fake NVML) and a trainer over TLS with
authentication, with the scrape fields the stacks render (`secured_scrape_fields`) and the web
configs they render (`web_config_document`): `up` is 1. Scrapes without the credential, with a
wrong one, without the client certificate the poller requires, or over plain HTTP are refused
(`up` 0, with the reason Prometheus reports). CA and certificates are made in the test."""

from __future__ import annotations

import dataclasses
import http.client
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from foxhunt_trainer.contract import catalog
from foxhunt_trainer.contract.web_config import WEB_CONFIG_ENV, secret_hash, web_config_document
from harness.prometheus import PrometheusServer
from harness.trainer_process import TrainerProcess
from observability.config import ScrapeSecurity
from observability.scrape_config import CA_KEY, CERT_KEY, KEY_KEY, secured_scrape_fields
from tests.tls_material import Certificates, make_certificates

from .conftest import load_harness

pytestmark = pytest.mark.slow

SERVER_NAME = "metrics.foxhunt.test"
TOKEN = "poller-scrape-token-0123456789abcdef"
PASSWORD = "trainer-scrape-password-fedcba9876543210"


def write_secret(directory: Path, name: str, files: dict[str, str | bytes]) -> None:
    secret = directory / name
    secret.mkdir(parents=True, exist_ok=True)
    for key, content in files.items():
        (secret / key).write_bytes(content if isinstance(content, bytes) else content.encode())


def wait_served(port: int, context: ssl.SSLContext, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        connection = http.client.HTTPSConnection("127.0.0.1", port, timeout=2, context=context)
        try:
            connection.request("GET", "/healthz")
            if connection.getresponse().status == 200:
                return
        except OSError:
            pass
        finally:
            connection.close()
        time.sleep(0.1)
    raise AssertionError(f"{what} not serving HTTPS on {port}")


@dataclasses.dataclass
class Setup:
    prometheus: PrometheusServer
    poller_port: int
    trainer_port: int
    certs: Certificates


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    work = tmp_path_factory.mktemp("scrape-tls")
    certs = make_certificates(work / "pki", SERVER_NAME)
    secrets = work / "secrets"  # what Prometheus mounts: <dir>/<secret>/<key>
    write_secret(secrets, "metrics-tls", {CA_KEY: certs.ca_cert.read_bytes()})
    write_secret(secrets, "scrape-token", {"token": TOKEN})
    write_secret(secrets, "scrape-password", {"password": PASSWORD})
    write_secret(secrets, "wrong-password", {"password": "not-it"})
    write_secret(
        secrets, "prometheus-client", {CERT_KEY: certs.client_cert.read_bytes(), KEY_KEY: certs.client_key.read_bytes()}
    )
    poller_security = ScrapeSecurity(
        SERVER_NAME, "metrics-tls", "scrape-token", client_cert_secret="prometheus-client", secrets_dir=str(secrets)
    )
    trainer_security = ScrapeSecurity(
        SERVER_NAME, "metrics-tls", "scrape-password", authentication="basic", secrets_dir=str(secrets)
    )
    # The poller requires client certificates and a bearer token; the trainer basic auth.
    poller_web = work / "poller-web.yml"
    poller_web.write_text(
        yaml.safe_dump(
            web_config_document(
                cert_file=str(certs.server_cert),
                key_file=str(certs.server_key),
                client_ca_file=str(certs.ca_cert),
                bearer_token_hashes=(secret_hash(TOKEN),),
            )
        )
    )
    trainer_web = work / "trainer-web.yml"
    trainer_web.write_text(
        yaml.safe_dump(
            web_config_document(
                cert_file=str(certs.server_cert),
                key_file=str(certs.server_key),
                basic_auth_users={"prometheus": secret_hash(PASSWORD)},
            )
        )
    )
    harness = load_harness()
    lib_dir = harness.build_fake_nvml(work / "nvml-lib")
    nvml = work / "nvml.conf"
    harness.FakeNvml(gpus=[harness.FakeGpu(), harness.FakeGpu()]).write(nvml)
    poller = harness.PollerProcess(
        lib_dir, nvml, work, args=("--min-interval", "0", "--web-config-file", str(poller_web))
    )
    trainer = TrainerProcess(work, "--epoch-seconds", "0.2", "--linger", "-1", env={WEB_CONFIG_ENV: str(trainer_web)})
    client = ssl.create_default_context(cafile=str(certs.ca_cert))
    client.check_hostname = False
    client.load_cert_chain(certs.client_cert, certs.client_key)
    try:
        wait_served(poller.port, client, "poller")
        wait_served(trainer.port, client, "trainer")

        def job(name: str, port: int, fields: dict[str, Any]) -> dict[str, Any]:
            return {
                "job_name": name,
                "scrape_interval": "1s",
                "scrape_timeout": "1s",
                **fields,
                "static_configs": [{"targets": [f"127.0.0.1:{port}"]}],
            }

        poller_fields = secured_scrape_fields(poller_security)
        trainer_fields = secured_scrape_fields(trainer_security)
        no_credential = {k: v for k, v in poller_fields.items() if k != "authorization"}
        no_client_cert = {
            **poller_fields,
            "tls_config": {k: v for k, v in poller_fields["tls_config"].items() if k not in ("cert_file", "key_file")},
        }
        wrong_password = secured_scrape_fields(
            dataclasses.replace(trainer_security, credentials_secret="wrong-password")
        )
        jobs = [
            job("poller", poller.port, poller_fields),
            job("trainer", trainer.port, trainer_fields),
            job("poller-without-credential", poller.port, no_credential),
            job("poller-without-client-cert", poller.port, no_client_cert),
            job("poller-plain-http", poller.port, {}),
            job(
                "trainer-without-credential",
                trainer.port,
                {k: v for k, v in trainer_fields.items() if k != "basic_auth"},
            ),
            job("trainer-wrong-password", trainer.port, wrong_password),
        ]
        config = yaml.safe_dump({"global": {"scrape_interval": "1s"}, "scrape_configs": jobs})
        with PrometheusServer(work / "prometheus", config) as prometheus:
            yield Setup(prometheus, poller.port, trainer.port, certs)
    finally:
        poller.stop()
        trainer.stop()


def targets(prometheus: PrometheusServer) -> dict[str, dict[str, Any]]:
    """Active targets by job, once each has been scraped."""
    deadline = time.monotonic() + 30
    while True:
        active = prometheus.api.get("/api/v1/targets")["activeTargets"]
        by_job = {t["labels"]["job"]: t for t in active}
        if len(by_job) == 7 and all(t["health"] != "unknown" for t in by_job.values()):
            return by_job
        if time.monotonic() > deadline:
            raise AssertionError(f"targets not all scraped: {by_job}")
        time.sleep(0.5)


def test_prometheus_scrapes_the_poller_and_a_trainer_over_tls_with_authentication(setup: Setup) -> None:
    by_job = targets(setup.prometheus)
    assert by_job["poller"]["health"] == "up", by_job["poller"]["lastError"]
    assert by_job["trainer"]["health"] == "up", by_job["trainer"]["lastError"]
    up = {r["metric"]["job"]: r["value"][1] for r in setup.prometheus.api.query("up")}
    assert up["poller"] == up["trainer"] == "1"
    assert setup.prometheus.api.query(f'{catalog.GPU_POLLER_DEVICES.name}{{job="poller"}}')  # the pages arrived
    assert setup.prometheus.api.query(f'{catalog.TRAINING_JOBS_BY_STATUS.name}{{job="trainer"}}')


@pytest.mark.parametrize(
    ("job", "reason"),
    [
        ("poller-without-credential", "401 Unauthorized"),
        # TLS 1.3: the server checks the client's certificate after the client's side of the
        # handshake is done, so the client reads the server's alert ("certificate required"), or,
        # when the server has closed before the client's request is written, a reset.
        ("poller-without-client-cert", ("certificate", "connection reset by peer")),
        ("poller-plain-http", 'Get "http://'),  # reset or EOF: the server speaks only TLS
        ("trainer-without-credential", "401 Unauthorized"),
        ("trainer-wrong-password", "401 Unauthorized"),
    ],
)
def test_scrapes_without_the_credential_or_certificate_are_refused(
    setup: Setup, job: str, reason: str | tuple[str, ...]
) -> None:
    target = targets(setup.prometheus)[job]
    assert target["health"] == "down"
    reasons = (reason,) if isinstance(reason, str) else reason
    assert any(r in target["lastError"] for r in reasons), target["lastError"]
    up = {r["metric"]["job"]: r["value"][1] for r in setup.prometheus.api.query("up")}
    assert up[job] == "0"
