"""What torchrun hands a rank, written to `<out>/rank-<RANK>.json`, after one all-reduce over gloo
that every rank must join (the sum of the ranks proves all of them rendezvoused)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

KEYS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "GROUP_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
        "FOXHUNT_METRICS_BASE_PORT", "TRAINING_JOB_NAME")  # fmt: skip


def main(out: Path) -> None:
    dist.init_process_group("gloo")
    total = torch.tensor([float(dist.get_rank())])
    dist.all_reduce(total)
    record: dict[str, object] = {key: os.environ.get(key) for key in KEYS}
    record["rank_sum"] = total.item()
    (out / f"rank-{dist.get_rank()}.json").write_text(json.dumps(record))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[sys.argv.index("--out") + 1]))
