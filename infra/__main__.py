"""Pulumi entry point (`main: infra/` in Pulumi.yaml): `pulumi preview` / `pulumi up` run this."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from infra.program import main

main()
