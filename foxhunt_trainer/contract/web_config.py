"""The web config of a metrics server: TLS and authentication, in the file format of the Prometheus
exporter-toolkit (`--web.config.file` of node_exporter and dcgm-exporter), read by the GPU poller
and the trainer's metrics server.

```yaml
tls_server_config:
  cert_file: /etc/metrics-web/tls.crt      # PEM certificate (chain), re-read when it changes
  key_file: /etc/metrics-web/tls.key
  client_ca_file: /etc/metrics-web/ca.crt  # optional: verify client certificates against it
  client_auth_type: RequireAndVerifyClientCert  # NoClientCert (default without a CA),
                                                # VerifyClientCertIfGiven, RequireAndVerifyClientCert
  min_version: TLS12                       # TLS12 (default) or TLS13
basic_auth_users:                          # user: hash of the password
  prometheus: sha256:<hex>
bearer_token_hashes:                       # hashes of accepted bearer tokens
  - sha256:<hex>
```

Hashes are `sha256:<hex of SHA-256 of the secret>` (`secret_hash`): the credentials are random
tokens made by the deployment (Pulumi secrets), not human passwords, so a salted slow hash buys
nothing and the hash is the same on every render. exporter-toolkit's bcrypt hashes are refused with
that explanation. Credentials are compared in constant time. `/healthz` needs no credentials (it
says nothing but "serving"), so kubelet probes work; it still goes over TLS when TLS is on.

A bad file raises `WebConfigError` naming the file, the key and what is expected: a server never
starts open when it was told to be closed.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import ssl
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from foxhunt_trainer.contract.http_server import Authorizer, Request, Response

# The trainer's metrics server reads the web config file this names (the job template sets it).
WEB_CONFIG_ENV = "FOXHUNT_METRICS_WEB_CONFIG_FILE"
CLIENT_AUTH_TYPES = ("NoClientCert", "VerifyClientCertIfGiven", "RequireAndVerifyClientCert")
TLS_VERSIONS = {"TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
HASH_PREFIX = "sha256:"
# Exempt from authentication: says only that the process serves HTTP.
UNAUTHENTICATED_PATHS = frozenset({"/healthz"})
RELOAD_CHECK_SECONDS = 10.0


class WebConfigError(ValueError):
    """The web config file is unreadable or wrong; the message names the key and what is expected."""


def secret_hash(secret: str) -> str:
    """`sha256:<hex>`: how a password or bearer token is written into a web config."""
    return HASH_PREFIX + hashlib.sha256(secret.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class TlsServerConfig:
    cert_file: Path
    key_file: Path
    client_ca_file: Path | None = None
    client_auth_type: str = "NoClientCert"
    min_version: str = "TLS12"


@dataclass(frozen=True)
class WebConfig:
    tls: TlsServerConfig | None = None
    basic_auth_users: Mapping[str, str] | None = None
    bearer_token_hashes: tuple[str, ...] = ()

    @property
    def authenticates(self) -> bool:
        return bool(self.basic_auth_users) or bool(self.bearer_token_hashes)


def _check_hash(where: str, value: object) -> str:
    if not isinstance(value, str):
        raise WebConfigError(f"{where}: expected a string sha256:<64 hex digits>, got {type(value).__name__}")
    if value.startswith(("$2a$", "$2b$", "$2y$")):
        raise WebConfigError(
            f"{where}: bcrypt hashes are not supported; write sha256:<hex of SHA-256 of the secret> "
            "(the secret must be a random token, not a human password)"
        )
    digest = value.removeprefix(HASH_PREFIX)
    if not value.startswith(HASH_PREFIX) or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise WebConfigError(f"{where}: expected sha256:<64 lower-case hex digits>")
    return value


def _file(where: str, value: object, base: Path) -> Path:
    if not isinstance(value, str) or not value.strip():
        raise WebConfigError(f"{where}: expected the path of a PEM file")
    path = base / value
    if not path.is_file():
        raise WebConfigError(f"{where}: {path} is not a readable file")
    return path


def _mapping(where: str, value: object, allowed: tuple[str, ...]) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise WebConfigError(f"{where}: expected a mapping, got {type(value).__name__}")
    unknown = sorted(str(k) for k in value if k not in allowed)
    if unknown:
        raise WebConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; expected some of {', '.join(allowed)}")
    return value


def parse_web_config(data: object, base: Path, source: str = "web config") -> WebConfig:
    """A WebConfig from the parsed YAML document; relative file paths are taken from `base`."""
    if data is None:
        return WebConfig()
    top = _mapping(source, data, ("tls_server_config", "basic_auth_users", "bearer_token_hashes"))
    tls = None
    if top.get("tls_server_config") is not None:
        where = f"{source}: tls_server_config"
        keys = ("cert_file", "key_file", "client_ca_file", "client_auth_type", "min_version")
        section = _mapping(where, top["tls_server_config"], keys)
        ca = section.get("client_ca_file")
        ca_path = _file(f"{where}.client_ca_file", ca, base) if ca is not None else None
        auth_type = section.get("client_auth_type", "RequireAndVerifyClientCert" if ca_path else "NoClientCert")
        if auth_type not in CLIENT_AUTH_TYPES:
            expected = ", ".join(CLIENT_AUTH_TYPES)
            raise WebConfigError(f"{where}.client_auth_type: {auth_type!r} is not one of {expected}")
        if auth_type != "NoClientCert" and ca_path is None:
            raise WebConfigError(f"{where}.client_auth_type: {auth_type} needs client_ca_file")
        version = section.get("min_version", "TLS12")
        if version not in TLS_VERSIONS:
            raise WebConfigError(f"{where}.min_version: {version!r} is not one of {', '.join(TLS_VERSIONS)}")
        tls = TlsServerConfig(
            _file(f"{where}.cert_file", section.get("cert_file"), base),
            _file(f"{where}.key_file", section.get("key_file"), base),
            ca_path,
            auth_type,
            version,
        )
    users: dict[str, str] = {}
    raw_users = top.get("basic_auth_users")
    if raw_users is not None:
        if not isinstance(raw_users, dict):
            raise WebConfigError(f"{source}: basic_auth_users: expected a mapping of user to hash")
        for user, value in raw_users.items():
            if not isinstance(user, str) or not user or ":" in user:
                raise WebConfigError(f"{source}: basic_auth_users: {user!r} is not a user name (no colon)")
            users[user] = _check_hash(f"{source}: basic_auth_users.{user}", value)
    raw_tokens = top.get("bearer_token_hashes")
    tokens: tuple[str, ...] = ()
    if raw_tokens is not None:
        if not isinstance(raw_tokens, list):
            raise WebConfigError(f"{source}: bearer_token_hashes: expected a list of hashes")
        tokens = tuple(_check_hash(f"{source}: bearer_token_hashes[{i}]", v) for i, v in enumerate(raw_tokens))
    return WebConfig(tls, users or None, tokens)


def web_config_document(
    *,
    cert_file: str | None = None,
    key_file: str | None = None,
    client_ca_file: str | None = None,
    basic_auth_users: Mapping[str, str] | None = None,
    bearer_token_hashes: tuple[str, ...] = (),
) -> dict[str, Any]:
    """A web config file's document (what `parse_web_config` reads): TLS when a certificate is
    given (client certificates required when a client CA is), and the credentials' hashes."""
    document: dict[str, Any] = {}
    if cert_file is not None and key_file is not None:
        tls: dict[str, Any] = {"cert_file": cert_file, "key_file": key_file, "min_version": "TLS12"}
        if client_ca_file is not None:
            tls["client_ca_file"] = client_ca_file
            tls["client_auth_type"] = "RequireAndVerifyClientCert"
        document["tls_server_config"] = tls
    if basic_auth_users:
        document["basic_auth_users"] = dict(basic_auth_users)
    if bearer_token_hashes:
        document["bearer_token_hashes"] = list(bearer_token_hashes)
    return document


def load_web_config(path: str | Path) -> WebConfig:
    """The web config file at `path` (relative file names inside it are taken from its directory)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise WebConfigError(f"web config {path}: cannot read it: {err}") from None
    try:
        # Imported here: the trainer library needs PyYAML only to read a web config file.
        import yaml
    except ImportError:
        raise WebConfigError(
            f"web config {path}: reading it needs PyYAML (pip install 'foxhunt-trainer[tls]')"
        ) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise WebConfigError(f"web config {path}: not YAML: {err}") from None
    return parse_web_config(data, path.parent, f"web config {path}")


def ssl_context(tls: TlsServerConfig) -> ssl.SSLContext:
    """A server-side context: the certificate and key, the client CA and how clients must present certs."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = TLS_VERSIONS[tls.min_version]
    try:
        context.load_cert_chain(tls.cert_file, tls.key_file)
        if tls.client_ca_file is not None:
            context.load_verify_locations(cafile=tls.client_ca_file)
    except (ssl.SSLError, OSError) as err:
        raise WebConfigError(f"tls_server_config: cannot load {tls.cert_file} / {tls.key_file}: {err}") from None
    context.verify_mode = {
        "NoClientCert": ssl.CERT_NONE,
        "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
        "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
    }[tls.client_auth_type]
    return context


class ReloadingContext:
    """The SSLContext of a TlsServerConfig, rebuilt when its files change (cert-manager renews the
    Secret in place); checked at most every RELOAD_CHECK_SECONDS. A bad new file keeps the old context."""

    def __init__(self, tls: TlsServerConfig) -> None:
        self._tls = tls
        self._lock = threading.Lock()
        self._stamp = self._files_stamp()
        self._context = ssl_context(tls)
        self._checked = time.monotonic()

    def _files_stamp(self) -> tuple[float, ...]:
        stamps = []
        for file in (self._tls.cert_file, self._tls.key_file, self._tls.client_ca_file):
            if file is None:
                continue
            try:
                stamps.append(os.stat(file).st_mtime)
            except OSError:
                stamps.append(-1.0)
        return tuple(stamps)

    def __call__(self) -> ssl.SSLContext:
        now = time.monotonic()
        if now - self._checked < RELOAD_CHECK_SECONDS:
            return self._context
        with self._lock:
            self._checked = now
            stamp = self._files_stamp()
            if stamp != self._stamp:
                try:
                    self._context = ssl_context(self._tls)
                    self._stamp = stamp
                except WebConfigError:
                    pass  # half-written files: keep serving with the old ones, try again later
        return self._context


def _digest_matches(secret: str, hashes: tuple[str, ...]) -> bool:
    presented = secret_hash(secret)
    matched = False
    for stored in hashes:
        matched |= hmac.compare_digest(presented, stored)
    return matched


def authorizer(config: WebConfig) -> Authorizer | None:
    """The check a server runs on each request, or None when the config asks for no credentials."""
    if not config.authenticates:
        return None
    users = dict(config.basic_auth_users or {})
    tokens = config.bearer_token_hashes
    challenge = 'Basic realm="metrics"' if users else 'Bearer realm="metrics"'

    def check(request: Request) -> Response | None:
        if request.path in UNAUTHENTICATED_PATHS:
            return None
        scheme, _, credentials = request.headers.get("authorization", "").strip().partition(" ")
        scheme = scheme.lower()
        credentials = credentials.strip()
        if scheme == "basic" and users:
            try:
                user, sep, password = base64.b64decode(credentials, validate=True).decode("utf-8").partition(":")
            except (binascii.Error, UnicodeDecodeError, ValueError):
                user, sep, password = "", "", ""
            stored = users.get(user)
            # Hash even for an unknown user, so the answer takes as long.
            if sep and _digest_matches(password, (stored or HASH_PREFIX + "0" * 64,)) and stored:
                return None
        elif scheme == "bearer" and tokens and credentials and _digest_matches(credentials, tokens):
            return None
        return Response(401, b"unauthorized\n", headers=(("WWW-Authenticate", challenge),))

    return check
