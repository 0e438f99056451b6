"""The bottleneck verdict's thresholds (`foxhunt_trainer.contract.verdicts`), copied from
observability/thresholds.yaml by `make generate`: edit that file, never this one (a test fails while
this copy is stale)."""

TRAINING_DATA_WAIT_RATIO = 0.2  # trainingDataWaitRatio (ratio)
TRAINING_CHECKPOINT_RATIO = 0.2  # trainingCheckpointRatio (ratio)
TRAINING_COMMUNICATION_SHARE_RATIO = 0.5  # trainingCommunicationShareRatio (ratio)
TRAINING_COMPUTE_SATURATED_RATIO = 0.8  # trainingComputeSaturatedRatio (ratio)
TRAINING_COMPUTE_SATURATED_GPU_BUSY_PERCENT = 80.0  # trainingComputeSaturatedGpuBusyPercent (percent)
