"""Build the poller image offline with buildah, for the image test and the image-size benchmark.

No registry image is pulled. The base is a Debian bookworm made with `debootstrap --variant=minbase
--include=python3` from the Debian mirror apt on this machine already uses (read from apt's
sources at run time), trimmed of apt lists, caches and docs, and cached as a tarball under
/var/cache/foxhunt-observability (keyed by everything that shapes it) so only the first run on a
machine pays for it. The build stage's image is that base plus pip (copied from the running
Python's pip) and a wheelhouse of poller/requirements.txt made with the machine's own pip
configuration. Both are passed to poller/Dockerfile as BUILD_IMAGE and BASE_IMAGE.

Storage: buildah with vfs and chroot isolation (no daemon, no overlay, no user namespaces), in a
private `--root`/`--runroot` per build so tests never collide.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra import REPO_ROOT

DOCKERFILE = REPO_ROOT / "poller" / "Dockerfile"
REQUIREMENTS = REPO_ROOT / "poller" / "requirements.txt"
CACHE_ROOT = Path(os.environ.get("FOXHUNT_CACHE_DIR", "/var/cache/foxhunt-observability"))
SUITE = "bookworm"
BASE_PACKAGES = ("python3",)
# Removed from the debootstrap tree: nothing at run time reads them.
TRIMMED = (
    "var/cache/apt/archives",
    "var/cache/apt/pkgcache.bin",
    "var/cache/apt/srcpkgcache.bin",
    "var/lib/apt/lists",
    "usr/share/doc",
    "usr/share/man",
    "usr/share/info",
    "usr/share/locale",
    "var/log",
)
BASE_RECIPE_VERSION = 1  # bump when the recipe changes in a way the key does not capture
BASE_IMAGE = "localhost/poller-base:offline"
BUILD_IMAGE = "localhost/poller-build:offline"


def apt_sources() -> list[dict[str, list[str]]]:
    """Every apt source of this machine as {'types', 'uris', 'suites', 'components'} lists."""
    entries: list[dict[str, list[str]]] = []
    sources_dir = Path("/etc/apt/sources.list.d")
    for path in sorted(sources_dir.glob("*.sources")) if sources_dir.is_dir() else []:
        for stanza in re.split(r"\n\s*\n", path.read_text()):
            fields: dict[str, list[str]] = {}
            for line in stanza.splitlines():
                if line.startswith("#") or ":" not in line or line[:1].isspace():
                    continue
                key, _, value = line.partition(":")
                fields[key.strip().lower()] = value.split()
            if fields.get("enabled", ["yes"]) != ["no"]:
                entries.append(fields)
    one_line_files = [Path("/etc/apt/sources.list")]
    if sources_dir.is_dir():
        one_line_files += sorted(sources_dir.glob("*.list"))
    for path in one_line_files:
        if not path.is_file():
            continue
        for line in path.read_text().splitlines():
            words = re.sub(r"\[[^]]*\]", "", line.split("#", 1)[0]).split()
            if len(words) >= 3 and words[0] in ("deb", "deb-src"):
                entries.append({"types": [words[0]], "uris": [words[1]], "suites": [words[2]], "components": words[3:]})
    return entries


def debian_mirror(suite: str = SUITE) -> str:
    """The URI of the apt source that serves `suite` itself (not -updates or -security), main."""
    for entry in apt_sources():
        if (
            "deb" in entry.get("types", [])
            and suite in entry.get("suites", [])
            and ("main" in entry.get("components", []))
        ):
            return entry["uris"][0]
    raise RuntimeError(f"no apt source serves Debian {suite} main; debootstrap needs one (see /etc/apt/sources*)")


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _key(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def base_rootfs_tar(cache_root: Path = CACHE_ROOT) -> Path:
    """The trimmed Debian+python3 root filesystem as a tarball, built once per machine."""
    mirror = debian_mirror()
    key = _key(SUITE, "minbase", BASE_PACKAGES, mirror, TRIMMED, BASE_RECIPE_VERSION, os.uname().machine)
    target = cache_root / f"debian-{SUITE}-python3-{key}.tar"
    with _locked(cache_root):
        if target.exists():
            return target
        with tempfile.TemporaryDirectory(dir=cache_root, prefix="debootstrap-") as work:
            rootfs = Path(work) / "rootfs"
            subprocess.run(
                [
                    "debootstrap",
                    "--variant=minbase",
                    f"--include={','.join(BASE_PACKAGES)}",
                    SUITE,
                    str(rootfs),
                    mirror,
                ],
                check=True,
                capture_output=True,
                text=True,
            )
            for relative in TRIMMED:
                path = rootfs / relative
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                    path.mkdir()
                elif path.exists():
                    path.unlink()
            partial = Path(work) / "rootfs.tar"
            subprocess.run(["tar", "-C", str(rootfs), "--numeric-owner", "-cf", str(partial), "."], check=True)
            os.replace(partial, target)
    return target


def wheelhouse(cache_root: Path = CACHE_ROOT) -> Path:
    """Wheels of poller/requirements.txt, downloaded with this machine's pip configuration."""
    target = cache_root / f"wheels-{_key(REQUIREMENTS.read_text())}"
    with _locked(cache_root):
        if not target.exists():
            partial = Path(tempfile.mkdtemp(dir=cache_root, prefix="wheels-"))
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--quiet",
                    "--only-binary=:all:",
                    "--no-deps",
                    "-r",
                    str(REQUIREMENTS),
                    "-d",
                    str(partial),
                ],
                check=True,
                capture_output=True,
                text=True,
            )
            partial.chmod(0o755)
            os.replace(partial, target)
    return target


def pip_package_dir() -> Path:
    spec = importlib.util.find_spec("pip")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("pip is not importable from this Python: the build stage needs a copy of it")
    return Path(next(iter(spec.submodule_search_locations)))


def mounts_under(path: Path) -> list[str]:
    """Mount points at or below `path` (never delete a tree with a bind mount inside)."""
    prefix = str(path.resolve())
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == prefix or point.startswith(prefix + "/"):
            found.append(point)
    return found


class Buildah:
    """buildah on a private vfs store with chroot isolation."""

    def __init__(self, store: Path) -> None:
        self.store = store
        self.prefix = [
            "buildah",
            "--root",
            str(store / "root"),
            "--runroot",
            str(store / "runroot"),
            "--storage-driver",
            "vfs",
        ]
        self.env = {**os.environ, "BUILDAH_ISOLATION": "chroot"}

    def command(self, *args: str) -> list[str]:
        return [*self.prefix, *args]

    def __call__(self, *args: str, cwd: Path | None = None) -> str:
        result = subprocess.run(self.command(*args), env=self.env, cwd=cwd, capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"buildah {' '.join(args)} failed ({result.returncode}):\n{result.stderr[-4000:]}")
        return result.stdout.strip()

    def remove_store(self) -> None:
        with contextlib.suppress(RuntimeError):
            self("rm", "--all")
        leftover = mounts_under(self.store)
        if leftover:
            raise RuntimeError(f"not deleting {self.store}: still mounted: {leftover}")
        shutil.rmtree(self.store, ignore_errors=True)


@dataclass(frozen=True)
class BuiltImage:
    buildah: Buildah
    tag: str
    config: dict[str, Any]  # the Docker image config (User, Entrypoint, Healthcheck, Env, ...)
    layer_sizes: tuple[int, ...]  # uncompressed layer tar sizes, bottom first

    @property
    def size_bytes(self) -> int:
        return sum(self.layer_sizes)


def build_poller_image(
    store: Path, tag: str = "localhost/gpu-poller:test", cache_root: Path = CACHE_ROOT
) -> BuiltImage:
    """Build poller/Dockerfile offline into the buildah store at `store`."""
    buildah = Buildah(store)
    base_tar = base_rootfs_tar(cache_root)
    wheels = wheelhouse(cache_root)

    container = buildah("from", "scratch")
    buildah("add", container, str(base_tar), "/")
    buildah("commit", "--quiet", "--rm", container, BASE_IMAGE)

    pip_conf = store / "pip.conf"
    pip_conf.write_text("[global]\nno-index = true\nfind-links = /opt/wheelhouse\n")
    container = buildah("from", BASE_IMAGE)
    buildah("copy", container, str(pip_package_dir()), "/usr/lib/python3/dist-packages/pip")
    buildah("copy", container, str(wheels), "/opt/wheelhouse")
    buildah("copy", container, str(pip_conf), "/etc/pip.conf")
    buildah("commit", "--quiet", "--rm", container, BUILD_IMAGE)

    buildah(
        "bud",
        "--isolation",
        "chroot",
        "--format",
        "docker",
        "--layers=false",
        "--build-arg",
        f"BUILD_IMAGE={BUILD_IMAGE}",
        "--build-arg",
        f"BASE_IMAGE={BASE_IMAGE}",
        "-f",
        str(DOCKERFILE),
        "-t",
        tag,
        str(REPO_ROOT),
        cwd=REPO_ROOT,
    )
    inspected = json.loads(buildah("inspect", "--type", "image", tag))
    manifest = json.loads(inspected["Manifest"])
    if not all(layer["mediaType"].endswith(".tar") for layer in manifest["layers"]):
        raise RuntimeError(f"expected uncompressed layers in the local store: {manifest['layers']}")
    return BuiltImage(buildah, tag, inspected["Docker"]["config"], tuple(layer["size"] for layer in manifest["layers"]))


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (from /proc), nearest first."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(entry.name))
    found: list[int] = []
    queue = [pid]
    while queue:
        for child in children.get(queue.pop(0), []):
            found.append(child)
            queue.append(child)
    return found


def process_uid(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise RuntimeError(f"no Uid line for {pid}")


def process_cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
    except OSError:
        return []
