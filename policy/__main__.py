"""CrossGuard entry point: `pulumi preview --policy-pack policy` runs this (via `python -m
pulumi.policy <engine> policy`), and so does `python policy/__main__.py`. Either way it serves the
analyzer over gRPC on 127.0.0.1 and prints the port on stdout."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from policy.pack import serve

serve()
