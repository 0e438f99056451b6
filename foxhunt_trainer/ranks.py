"""Where a training process stands in a distributed job: its rank, local rank, world size and node.

torchrun (`torch.distributed.run`) and most launchers built on it (Lightning, Accelerate, the
Kubeflow training operator) set `RANK`, `LOCAL_RANK`, `WORLD_SIZE` and `GROUP_RANK` (the node's
rank; `NODE_RANK` in Lightning and Slurm-style launchers). A process started without a launcher is
rank 0 of a job of one. A process group made without a launcher's environment
(`torch.multiprocessing.spawn` and `init_process_group(rank=..., world_size=...)`, as PyTorch's DDP
tutorial does) knows its rank and world size; the local rank is the rank there (one node) unless
LOCAL_RANK says otherwise (`RankInfo.of_process`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass

RANK_ENV = "RANK"
LOCAL_RANK_ENV = "LOCAL_RANK"
WORLD_SIZE_ENV = "WORLD_SIZE"
NODE_RANK_ENVS = ("GROUP_RANK", "NODE_RANK")
# No job of this project runs more ranks; a larger value is a misread variable.
MAX_WORLD_SIZE = 65536


@dataclass(frozen=True)
class RankInfo:
    """One process of a (possibly distributed) job."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    node_rank: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.world_size <= MAX_WORLD_SIZE:
            raise ValueError(f"world_size must be 1 to {MAX_WORLD_SIZE}, got {self.world_size}")
        for name in ("rank", "local_rank", "node_rank"):
            value = getattr(self, name)
            if not 0 <= value < self.world_size:
                raise ValueError(f"{name} must be 0 to world_size-1 ({self.world_size - 1}), got {value}")

    @property
    def label(self) -> str:
        """The `rank` label value of this process's per-rank series."""
        return str(self.rank)

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> RankInfo:
        """The launcher's view (RANK, LOCAL_RANK, WORLD_SIZE, GROUP_RANK/NODE_RANK); unset = rank 0 of 1."""
        env = os.environ if environ is None else environ
        node_var = next((v for v in NODE_RANK_ENVS if env.get(v, "").strip()), NODE_RANK_ENVS[0])
        values = {
            "rank": _integer(env, RANK_ENV, 0),
            "local_rank": _integer(env, LOCAL_RANK_ENV, 0),
            "world_size": _integer(env, WORLD_SIZE_ENV, 1),
            "node_rank": _integer(env, node_var, 0),
        }
        try:
            return cls(**values)
        except ValueError as error:
            shown = ", ".join(f"{v}={env.get(v)!r}" for v in (RANK_ENV, LOCAL_RANK_ENV, WORLD_SIZE_ENV, node_var))
            raise ValueError(f"the launcher's environment is inconsistent ({shown}): {error}") from None

    @classmethod
    def of_process(cls, environ: Mapping[str, str] | None = None) -> RankInfo:
        """The launcher's view (`from_env`) where it set RANK; else that of the process group this
        process joined, if any (torch.distributed already imported and initialized)."""
        env = os.environ if environ is None else environ
        dist = sys.modules.get("torch.distributed")
        if env.get(RANK_ENV, "").strip() or dist is None or not dist.is_available() or not dist.is_initialized():
            return cls.from_env(env)
        rank, world_size = int(dist.get_rank()), int(dist.get_world_size())
        local = env.get(LOCAL_RANK_ENV, "").strip()
        return cls(rank=rank, local_rank=int(local) if local.isdigit() else rank, world_size=world_size)


def _integer(env: Mapping[str, str], name: str, default: int) -> int:
    text = env.get(name, "").strip()
    if not text:
        return default
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{name}={text!r}: expected a whole number set by the launcher (torchrun)") from None
