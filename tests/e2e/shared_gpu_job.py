"""A real PyTorch job for the time-sliced GPU tests: it trains a small MLP for `--compute-share` of
each second and idles the rest, holds the GPU `--uuid`, and reports `--reserved-bytes` as its own
device memory there (the injected source: on a CPU machine there is no CUDA allocator to read).

    python -m tests.e2e.shared_gpu_job --port 9100 --job-id nb-1 --uuid GPU-... \
        --reserved-bytes 40000000000 --compute-share 0.9
"""

from __future__ import annotations

import argparse
import time

import torch

from foxhunt_trainer import TrainingMetrics


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--job-id", required=True)
    parser.add_argument("--uuid", required=True)
    parser.add_argument("--reserved-bytes", type=float, required=True)
    parser.add_argument("--compute-share", type=float, required=True)
    args = parser.parse_args()
    metrics = TrainingMetrics()
    metrics.serve(args.port, "127.0.0.1")
    job = metrics.start_job("notebook", args.job_id, gpu_uuids=[args.uuid])
    job.track_gpu_memory(lambda: {args.uuid: args.reserved_bytes})
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = torch.nn.MSELoss()
    x, y = torch.randn(256, 32), torch.randn(256, 1)
    job.set_status("running")
    while True:
        start = time.monotonic()
        with job.phase("compute"):
            while time.monotonic() - start < args.compute_share:
                optimizer.zero_grad()
                loss = loss_fn(model(x), y)
                loss.backward()
                optimizer.step()
        with job.phase("idle"):
            time.sleep(max(0.0, 1.0 - (time.monotonic() - start)))


if __name__ == "__main__":
    main()
