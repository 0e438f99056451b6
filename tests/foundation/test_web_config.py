"""The web config (exporter-toolkit style): every mistake named with its key, never a server that
starts open when it was told to be closed; the credential checks; TLS with a client CA."""

from __future__ import annotations

import base64
import http.client
import ssl
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry, Counter

from foxhunt_trainer.contract.exposition import CollectorPage, MetricsHTTPServer
from foxhunt_trainer.contract.http_server import Request
from foxhunt_trainer.contract.web_config import (
    WebConfig,
    WebConfigError,
    authorizer,
    load_web_config,
    parse_web_config,
    secret_hash,
    web_config_document,
)
from tests.tls_material import make_certificates

HASH = secret_hash("s3cret-token")


def request(path: str = "/metrics", authorization: str | None = None) -> Request:
    headers = {"host": "x"} | ({"authorization": authorization} if authorization else {})
    return Request("GET", path, "HTTP/1.1", headers, "peer")


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ([], "expected a mapping"),
        ({"tls_config": {}}, "unknown key.*tls_config"),
        (
            {"tls_server_config": {"cert_file": "missing.crt", "key_file": "k"}},
            r"cert_file: .*missing.crt is not a readable file",
        ),
        ({"tls_server_config": "yes"}, "tls_server_config: expected a mapping"),
        ({"basic_auth_users": {"prometheus": "$2y$10$abcdefghijklmnopqrstuv"}}, "bcrypt hashes are not supported"),
        ({"basic_auth_users": {"prometheus": "plaintext"}}, r"basic_auth_users.prometheus: expected sha256:"),
        ({"basic_auth_users": {"a:b": HASH}}, "is not a user name"),
        ({"basic_auth_users": ["prometheus"]}, "expected a mapping of user to hash"),
        ({"bearer_token_hashes": HASH}, "expected a list"),
        ({"bearer_token_hashes": [12]}, r"bearer_token_hashes\[0\]: expected a string"),
        ({"bearer_token_hashes": ["sha256:" + "A" * 64]}, "lower-case hex"),
    ],
)
def test_mistakes_are_named(tmp_path: Path, document: object, message: str) -> None:
    with pytest.raises(WebConfigError, match=message):
        parse_web_config(document, tmp_path)


def test_tls_settings_are_checked(tmp_path: Path) -> None:
    certs = make_certificates(tmp_path, "metrics.test")
    base = {"cert_file": str(certs.server_cert), "key_file": str(certs.server_key)}
    with pytest.raises(WebConfigError, match="client_auth_type: RequireAndVerifyClientCert needs client_ca_file"):
        parse_web_config({"tls_server_config": {**base, "client_auth_type": "RequireAndVerifyClientCert"}}, tmp_path)
    with pytest.raises(WebConfigError, match="min_version: 'TLS10' is not one of TLS12, TLS13"):
        parse_web_config({"tls_server_config": {**base, "min_version": "TLS10"}}, tmp_path)
    with pytest.raises(WebConfigError, match="client_auth_type: 'Maybe'"):
        parse_web_config({"tls_server_config": {**base, "client_auth_type": "Maybe"}}, tmp_path)
    config = parse_web_config({"tls_server_config": {**base, "client_ca_file": str(certs.ca_cert)}}, tmp_path)
    assert config.tls is not None and config.tls.client_auth_type == "RequireAndVerifyClientCert"


def test_unreadable_or_non_yaml_files_are_named(tmp_path: Path) -> None:
    with pytest.raises(WebConfigError, match="cannot read it"):
        load_web_config(tmp_path / "absent.yml")
    bad = tmp_path / "bad.yml"
    bad.write_text("tls_server_config: [unclosed\n")
    with pytest.raises(WebConfigError, match="not YAML"):
        load_web_config(bad)
    empty = tmp_path / "empty.yml"
    empty.write_text("")
    assert load_web_config(empty) == WebConfig()


def test_basic_and_bearer_credentials_are_checked_and_healthz_is_open() -> None:
    check = authorizer(WebConfig(basic_auth_users={"prometheus": HASH}, bearer_token_hashes=(HASH,)))
    assert check is not None
    assert check(request(authorization=basic("prometheus", "s3cret-token"))) is None
    assert check(request(authorization="Bearer s3cret-token")) is None
    assert check(request(authorization="bearer  s3cret-token ")) is None
    for refused in (
        None,
        basic("prometheus", "wrong"),
        basic("other", "s3cret-token"),
        "Bearer wrong",
        "Basic !!!",
        "Digest x",
    ):
        reply = check(request(authorization=refused))
        assert reply is not None and reply.status == 401
        assert ("WWW-Authenticate", 'Basic realm="metrics"') in reply.headers
    assert check(request("/healthz")) is None
    assert authorizer(WebConfig()) is None


def test_a_server_with_a_client_ca_refuses_clients_without_a_certificate(tmp_path: Path) -> None:
    certs = make_certificates(tmp_path, "metrics.test")
    path = tmp_path / "web.yml"
    path.write_text(
        yaml.safe_dump(
            web_config_document(
                cert_file=str(certs.server_cert),
                key_file=str(certs.server_key),
                client_ca_file=str(certs.ca_cert),
                bearer_token_hashes=(HASH,),
            )
        )
    )
    registry = CollectorRegistry()
    Counter("things", "Things.", registry=registry).inc()
    server = MetricsHTTPServer(("127.0.0.1", 0), CollectorPage(registry), web=load_web_config(path)).start()
    try:
        context = ssl.create_default_context(cafile=str(certs.ca_cert))
        context.check_hostname = False

        def get(ctx: ssl.SSLContext, headers: dict[str, str]) -> int:
            connection = http.client.HTTPSConnection("127.0.0.1", server.port, timeout=5, context=ctx)
            try:
                connection.request("GET", "/metrics", headers=headers)
                return connection.getresponse().status
            finally:
                connection.close()

        with pytest.raises((ssl.SSLError, ConnectionError)):
            get(context, {"Authorization": "Bearer s3cret-token"})
        context.load_cert_chain(certs.client_cert, certs.client_key)
        assert get(context, {"Authorization": "Bearer s3cret-token"}) == 200
        assert get(context, {}) == 401
    finally:
        server.stop()
