"""Exceptions sorted into the catalog's bounded error types: job failures and checkpoint failures.

The error type is a label value (`ml_training_failures_total{error_type}`,
`ml_checkpoint_save_failures_total{error_type}`), so every exception lands in one of a few fixed
values, never its class name or message. Classification reads the exception's class hierarchy (by
name, so no framework is imported to recognise its errors: `torch.cuda.OutOfMemoryError`,
botocore's `ClientError`) and, for the catch-all classes PyTorch raises (`RuntimeError`), its message.
An exception's `__cause__` chain is read too: a wrapped OSError is still an I/O error.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

# Job failures: `ml_training_failures_total{error_type}`.
NAN = "nan"  # non-finite values (FloatingPointError, anomaly detection, "NaN" in the message)
OOM = "oom"  # out of memory: MemoryError, CUDA/CPU allocator failures
TIMEOUT = "timeout"  # TimeoutError, collective or store timeouts
CONFIG = "config"  # bad settings or environment: ImportError, ValueError, TypeError, KeyError
IO = "io"  # files, network, storage: OSError and object-store client errors
EXCEPTION = "exception"  # anything else: a bug in the training script
FAILURE_ERROR_TYPES: tuple[str, ...] = (NAN, OOM, TIMEOUT, CONFIG, IO, EXCEPTION)

# Checkpoint save failures: `ml_checkpoint_save_failures_total{error_type}`.
CHECKPOINT_IO = "io_error"  # local or network filesystem: permission, read-only, disk full
CHECKPOINT_TIMEOUT = "timeout"
CHECKPOINT_SERIALIZATION = "serialization"  # the state cannot be pickled or written as a checkpoint
CHECKPOINT_STORAGE = "storage"  # object stores (S3, GCS, Azure) through their client libraries
CHECKPOINT_OTHER = "other"
CHECKPOINT_ERROR_TYPES: tuple[str, ...] = (
    CHECKPOINT_IO,
    CHECKPOINT_TIMEOUT,
    CHECKPOINT_SERIALIZATION,
    CHECKPOINT_STORAGE,
    CHECKPOINT_OTHER,
)

_OOM_NAMES = frozenset({"MemoryError", "OutOfMemoryError"})
_OOM_MESSAGE = re.compile(r"out of memory|can't allocate memory|cannot allocate memory|CUBLAS_STATUS_ALLOC_FAILED")
_NAN_MESSAGE = re.compile(r"\bnan\b|\binf\b|non-finite|not finite", re.IGNORECASE)
_TIMEOUT_MESSAGE = re.compile(r"timed out|timeout", re.IGNORECASE)
# What torch.save and other writers say when the file cannot be opened or written.
_IO_MESSAGE = re.compile(
    r"cannot be opened|unable to open|open file failed|failed writing|file write failed|permission denied"
    r"|read-only file system|no space left|disk quota|does not exist|no such file",
    re.IGNORECASE,
)
_SERIALIZATION_NAMES = frozenset({"PicklingError", "UnpicklingError"})
_SERIALIZATION_MESSAGE = re.compile(r"pickle|serializ|can't convert", re.IGNORECASE)
# Modules of the object-store clients whose exceptions are storage errors.
_STORAGE_MODULES = ("botocore", "boto3", "s3fs", "aiobotocore", "google.cloud", "google.api_core", "azure", "gcsfs")
_CONFIG_NAMES = frozenset({"ImportError", "ModuleNotFoundError", "ValueError", "TypeError", "KeyError"})


def _chain(error: BaseException) -> Iterator[BaseException]:
    """The error, then its causes (`raise ... from ...`, or the context it was raised in)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _class_names(error: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(error).__mro__}


def _from_storage_client(error: BaseException) -> bool:
    return any(type(error).__module__.startswith(module) for module in _STORAGE_MODULES)


def failure_type(error: BaseException) -> str:
    """The job failure type of an exception that ended a training job."""
    for link in _chain(error):
        names, message = _class_names(link), str(link)
        if names & _OOM_NAMES or _OOM_MESSAGE.search(message):
            return OOM
        if "FloatingPointError" in names or "NonFiniteError" in names:
            return NAN
        if "TimeoutError" in names:
            return TIMEOUT
        if "OSError" in names or _from_storage_client(link):
            return IO
    for link in _chain(error):
        message = str(link)
        if _NAN_MESSAGE.search(message):
            return NAN
        if _TIMEOUT_MESSAGE.search(message):
            return TIMEOUT
    if _class_names(error) & _CONFIG_NAMES:
        return CONFIG
    return EXCEPTION


def checkpoint_error_type(error: BaseException) -> str:
    """The checkpoint failure type of an exception raised while saving a checkpoint."""
    for link in _chain(error):
        names, message = _class_names(link), str(link)
        if "TimeoutError" in names:
            return CHECKPOINT_TIMEOUT
        if _from_storage_client(link):
            return CHECKPOINT_STORAGE
        if "OSError" in names or _IO_MESSAGE.search(message):
            return CHECKPOINT_IO
        if names & _SERIALIZATION_NAMES or _SERIALIZATION_MESSAGE.search(message):
            return CHECKPOINT_SERIALIZATION
    names = _class_names(error)
    if "RuntimeError" in names or "TypeError" in names or "AttributeError" in names:
        # torch.save's writer and pickle raise these for state it cannot write.
        return CHECKPOINT_SERIALIZATION
    return CHECKPOINT_OTHER
