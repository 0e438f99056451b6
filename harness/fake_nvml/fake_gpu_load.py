"""A "CUDA load" for the fake NVML: `fake_gpu_load.py CONFIG SECONDS`.

For SECONDS it makes every GPU of the fake's config file busy (NVML utilization 100 %, SM activity
95 %, tensor activity 80 %), then puts the file back as it was. The device check runs it in
place of a real load to prove it sees the GPM figures rise.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

BUSY = {"util_gpu": "100", "gpm.sm_util": "95.0", "gpm.any_tensor_util": "80.0", "gpm.sm_occupancy": "60.0"}


def busy(text: str) -> str:
    lines = []
    for line in text.splitlines():
        key, _, _ = line.partition(" ")
        parts = key.split(".", 2)
        if len(parts) == 3 and parts[0] == "gpu" and parts[2] in BUSY:
            line = f"{key} {BUSY[parts[2]]}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".load")
    tmp.write_text(text)
    os.replace(tmp, path)


def main() -> int:
    path, seconds = Path(sys.argv[1]), float(sys.argv[2])
    original = path.read_text()
    write(path, busy(original))
    try:
        time.sleep(seconds)
    finally:
        write(path, original)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
