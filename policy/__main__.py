"""CrossGuard entry point: `pulumi preview --policy-pack policy` runs this (the engine starts
`python -u -m pulumi.policy <engine> policy`), and so does `python policy/__main__.py`. Either way it
serves the analyzer over gRPC on 127.0.0.1 and prints the port on stdout."""

import io
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# PolicyPack writes the port to sys.stdout.buffer and never flushes: without `python -u` the port
# would sit in a pipe's buffer forever. Make stdout unbuffered, as the engine's `-u` does.
sys.stdout = io.TextIOWrapper(io.FileIO(sys.stdout.fileno(), "wb", closefd=False), write_through=True)

from policy.pack import serve  # noqa: E402

serve()
