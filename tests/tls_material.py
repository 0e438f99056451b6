"""A throw-away CA with a server and a client certificate, made with the openssl CLI (tests only)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Certificates:
    ca_cert: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _openssl(*args: str | Path, cwd: Path) -> None:
    subprocess.run(["openssl", *map(str, args)], cwd=cwd, check=True, capture_output=True, timeout=60)


def _ec_key(path: Path, cwd: Path) -> None:
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", path, cwd=cwd)


def _signed(name: str, extensions: str, directory: Path, ca: Path, ca_key: Path) -> tuple[Path, Path]:
    key, csr, cert, ext = (directory / f"{name}.{suffix}" for suffix in ("key", "csr", "crt", "ext"))
    _ec_key(key, directory)
    _openssl("req", "-new", "-key", key, "-out", csr, "-subj", f"/CN={name}", cwd=directory)
    ext.write_text(extensions)
    _openssl(
        "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-out", cert,
        "-days", "2", "-sha256", "-extfile", ext, cwd=directory,
    )  # fmt: skip
    return cert, key


def make_certificates(directory: Path, server_name: str, ca_name: str = "test-ca") -> Certificates:
    """A CA, a server certificate for `server_name` and 127.0.0.1, and a client certificate."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = directory / f"{ca_name}.key", directory / f"{ca_name}.crt"
    _ec_key(ca_key, directory)
    _openssl(
        "req", "-x509", "-new", "-key", ca_key, "-out", ca_cert, "-days", "2", "-sha256", "-subj", f"/CN={ca_name}",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=directory,
    )  # fmt: skip
    server = _signed(
        f"{ca_name}-server",
        f"subjectAltName=DNS:{server_name},IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
        directory,
        ca_cert,
        ca_key,
    )
    client = _signed(f"{ca_name}-client", "extendedKeyUsage=clientAuth\n", directory, ca_cert, ca_key)
    return Certificates(ca_cert, *server, *client)
