"""NVML access: initialise with backoff, read every GPU in one pass, contain every fault.

Faults and what the source does about them:
- library missing or driver not loaded (a CPU-only node): the pass reports NVML down, the
  first failure is logged once, init is retried with exponential backoff on later passes;
- a GPU lost (NVML_ERROR_GPU_IS_LOST): its samples go, the loss is counted once (as a
  `gpu_lost` GPU error under its index, and its UUID when it was ever read: a GPU lost before the
  poller first identified it is counted under its index alone), the other GPUs are still read,
  and NVML is re-initialised (with backoff) until the GPU answers again;
- a field a GPU does not support, or a function an older driver lacks (FunctionNotFound): the
  field is omitted for that GPU until the next re-initialisation, the rest is read;
- any other error on a field: that field is omitted from this pass and counted as `query`;
- NVML itself gone mid-session (uninitialised, driver unloaded): NVML is reported down and
  re-initialised with backoff;
- GPM (profiling metrics, see poller.gpm) missing from the driver or not supported by a GPU: the
  GPM metrics of that GPU are omitted, with one log line;
- a GPU in MIG mode: each of its MIG devices is read as a GPU of its own (memory and GPM, the
  figures NVML answers for a MIG device), after its parent. The parent's MIG devices are listed
  again at every pass, and a reconfiguration (instances destroyed or created) replaces them:
  a destroyed instance's series go with it, and a MIG device that stops answering is dropped and
  re-listed, never counted as a lost GPU (the parent's own readings say whether the GPU is lost).

Passes are not thread-safe: the caller (shared_pass.SharedPass) runs one at a time. The XID event
thread shares the session through `session_lock`, which re-initialisation also takes, so NVML is
never shut down under a waiting event call.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pynvml

from foxhunt_trainer.contract import catalog
from poller.error_counters import ErrorCounters
from poller.gpm import GPM_FUNCTION_NAMES, NO_GPM, GpmAllocationError, GpmCallError, GpmFunctions, GpmReader
from poller.nvml_calls import (
    FIELDS,
    READING_COUNT,
    READINGS_LAYOUT,
    FieldCall,
    FunctionMissingError,
    Readings,
    sample_from,
)
from poller.samples import (
    DriverInfo,
    GpuIdentity,
    GpuSample,
    MigInfo,
    PassResult,
    unidentified_gpu,
)

LOG = logging.getLogger(__name__)

LOST_CODES = frozenset({pynvml.NVML_ERROR_GPU_IS_LOST, pynvml.NVML_ERROR_RESET_REQUIRED})
UNSUPPORTED_CODES = frozenset({pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_FUNCTION_NOT_FOUND})
SESSION_CODES = frozenset(
    {pynvml.NVML_ERROR_UNINITIALIZED, pynvml.NVML_ERROR_DRIVER_NOT_LOADED, pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH}
)
# What a call on a MIG device answers once its instance is gone (destroyed, or its GPU lost).
MIG_GONE_CODES = LOST_CODES | {pynvml.NVML_ERROR_INVALID_ARGUMENT, pynvml.NVML_ERROR_NOT_FOUND}
# The calls a MIG device answers (the others are its parent's device-level readings).
MIG_CALLS = tuple(call for call in FIELDS if call.name == "memory")


class Backoff:
    """Exponential retry delays: initial, doubled each failure, capped at maximum."""

    def __init__(self, initial: float = 1.0, maximum: float = 30.0) -> None:
        if initial <= 0 or maximum < initial:
            raise ValueError(f"bad backoff: initial {initial}, maximum {maximum}")
        self.initial = initial
        self.maximum = maximum
        self._next = initial

    def next_delay(self) -> float:
        delay = self._next
        self._next = min(self._next * 2, self.maximum)
        return delay

    def reset(self) -> None:
        self._next = self.initial


def handle_address(handle: Any) -> int:
    """The address an NVML device handle points at (stable for the handle's life)."""
    return ctypes.cast(handle, ctypes.c_void_p).value or 0


@dataclass
class Device:
    gpu: GpuIdentity
    handle: Any
    readings: Readings  # the output buffers of `calls`
    calls: list[FieldCall]  # the fields this GPU answers (unsupported ones are dropped)
    gpm: GpmReader | None = None  # GPM samples, where the driver and the GPU offer them
    absent: tuple[int, ...] = ()  # the readings no call fills (set by drop_calls)
    # A GPU in MIG mode: its MIG devices' (slot, UUID) as last listed; None for any other device.
    mig_layout: tuple[tuple[int, str], ...] | None = None

    def drop_calls(self, calls: list[FieldCall]) -> None:
        """Stop making `calls` (until NVML re-initialises); their readings stay absent."""
        for call in calls:
            self.calls.remove(call)
        filled = {position for call in self.calls for position in call.positions}
        self.absent = tuple(position for position in range(READING_COUNT) if position not in filled)


@dataclass
class Session:
    """One nvmlInit .. nvmlShutdown span: the devices it enumerated and their handles."""

    driver: DriverInfo
    devices: list[Device]
    gpus_by_handle: dict[int, GpuIdentity]
    enumerated: int  # nvmlDeviceGetCount at init: GPUs present, answering or not
    # Owned by the XID event thread (created and used under NvmlSource.session_lock); freed by
    # NvmlSource before nvmlShutdown.
    event_set: Any = None
    events_registered: bool = False


class SessionBrokenError(Exception):
    """NVML stopped answering for the whole session (not one GPU)."""


def _cuda_version_text(version: int) -> str:
    """NVML's CUDA driver version integer (12040) as text (12.4)."""
    return f"{version // 1000}.{version % 1000 // 10}"


class NvmlSource:
    def __init__(
        self,
        counters: ErrorCounters,
        *,
        nvml: Any = pynvml,
        clock: Callable[[], float] = time.monotonic,
        backoff: Backoff | None = None,
    ) -> None:
        self._counters = counters
        self._nvml = nvml
        self._clock = clock
        self._backoff = backoff or Backoff()
        self.session_lock = threading.Lock()
        self._session: Session | None = None
        self._reinit_wanted = False
        self._next_attempt = 0.0
        self._down_logged = False
        self._lost: dict[int, GpuIdentity] = {}  # by index: GPUs lost and not back yet
        self._known: dict[int, GpuIdentity] = {}  # last identity seen at each index
        self._last_uncorrected: dict[GpuIdentity, int] = {}
        self._logged_field_errors: set[tuple[int, str, int]] = set()
        self._logged_missing: set[str] = set()
        self._gpm_totals: dict[str, dict[str, float]] = {}  # by UUID: interconnect bytes counted
        self._gpm_unsupported_logged: set[str] = set()  # UUIDs
        self._gpm_missing_logged = False

    @property
    def session(self) -> Session | None:
        return self._session

    def request_reinit(self) -> None:
        """Ask for a re-initialisation on the next pass the backoff allows (event thread)."""
        self._schedule_reinit()

    # -- one pass ---------------------------------------------------------------------------

    def collect(self) -> PassResult:
        started = self._clock()
        if (self._session is None or self._reinit_wanted) and started >= self._next_attempt:
            self._initialize()
        session = self._session
        samples: list[GpuSample] = []
        if session is not None:
            try:
                for device in list(session.devices):
                    if device.mig_layout is not None and device in session.devices:
                        self._refresh_migs(session, device)
                for device in list(session.devices):
                    sample = self._read_device(session, device)
                    if sample is not None:
                        samples.append(sample)
            except SessionBrokenError as err:
                self._session_broken(err)
                session = None
                samples = []
        return PassResult(
            nvml_up=session is not None,
            started_at=started,
            finished_at=self._clock(),
            samples=tuple(samples),
            driver=session.driver if session is not None else None,
            enumerated=session.enumerated if session is not None else 0,
        )

    def _read_device(self, session: Session, device: Device) -> GpuSample | None:
        failed: list[FieldCall] = []
        unsupported: list[FieldCall] = []
        for call in device.calls:
            code = call.function(*call.arguments)
            if code == 0:
                continue
            if device.gpu.mig is not None and code in MIG_GONE_CODES:
                self._mig_gone(session, device)
                return None
            if code in LOST_CODES:
                self._gpu_lost(session, device, self._nvml.NVMLError(code))
                return None
            if code in SESSION_CODES:
                raise SessionBrokenError(str(self._nvml.NVMLError(code)))
            error = self._nvml.NVMLError(code)
            if code in UNSUPPORTED_CODES:
                unsupported.append(call)
                LOG.info(
                    "GPU %d (%s): %s not available (%s); omitted", device.gpu.index, device.gpu.uuid, call.name, error
                )
                continue
            failed.append(call)
            self._counters.record_failure("query")
            key = (device.gpu.index, call.name, code)
            if key not in self._logged_field_errors:
                self._logged_field_errors.add(key)
                LOG.warning(
                    "GPU %d (%s): reading %s failed (%s); omitted from this pass",
                    device.gpu.index,
                    device.gpu.uuid,
                    call.name,
                    error,
                )
        readings: tuple[int | None, ...] | list[int | None] = READINGS_LAYOUT.unpack_from(device.readings)
        if device.absent or failed or unsupported:  # what no call filled this pass is left out
            readings = list(readings)
            for position in device.absent:
                readings[position] = None
            for call in failed + unsupported:
                for position in call.positions:
                    readings[position] = None
        if unsupported:  # not asked again until NVML re-initialises
            device.drop_calls(unsupported)
        gpm = device.gpm
        figures = NO_GPM
        if gpm is not None:
            try:
                figures = gpm.read()
            except GpmCallError as err:
                figures = err.figures
                if not self._gpm_failed(session, device, err.call, err.code):
                    return None
        sample = sample_from(device.gpu, readings, figures)
        self._count_new_uncorrected(sample)
        return sample

    def _gpm_failed(self, session: Session, device: Device, call: str, code: int) -> bool:
        """Act on a failed GPM call; False when the GPU turned out lost."""
        assert device.gpm is not None
        if device.gpu.mig is not None and code in MIG_GONE_CODES:
            self._mig_gone(session, device)
            return False
        if code in LOST_CODES:
            self._gpu_lost(session, device, self._nvml.NVMLError(code))
            return False
        if code in SESSION_CODES:
            raise SessionBrokenError(str(self._nvml.NVMLError(code)))
        error = self._nvml.NVMLError(code)
        if code in UNSUPPORTED_CODES:
            LOG.info(
                "GPU %d (%s): %s not available (%s); GPM metrics omitted",
                device.gpu.index,
                device.gpu.uuid,
                call,
                error,
            )
            device.gpm.free()
            device.gpm = None
            return True
        self._counters.record_failure("query")
        key = (device.gpu.index, call, code)
        if key not in self._logged_field_errors:
            self._logged_field_errors.add(key)
            LOG.warning(
                "GPU %d (%s): %s failed (%s); GPM metrics omitted from this pass",
                device.gpu.index,
                device.gpu.uuid,
                call,
                error,
            )
        return True

    def _count_new_uncorrected(self, sample: GpuSample) -> None:
        """Count increases of the driver's volatile uncorrected-ECC total seen since start."""
        value = sample.ecc_uncorrected_total
        if value is None:
            return
        previous = self._last_uncorrected.get(sample.gpu)
        if previous == value:  # the common case: nothing new
            return
        if previous is not None and value > previous:
            self._counters.record_error(sample.gpu, "ecc_uncorrected", value - previous)
        self._last_uncorrected[sample.gpu] = value

    # -- faults -----------------------------------------------------------------------------

    def _mark_lost(self, index: int, gpu: GpuIdentity, err: Exception) -> None:
        self._counters.record_failure("gpu_lost")
        if index in self._lost:
            return
        self._lost[index] = gpu
        self._counters.record_error(gpu, "gpu_lost")
        LOG.error(
            "GPU %d (%s) is lost (%s); its series are dropped until NVML re-initialises and it answers",
            index,
            gpu.uuid or "uuid unknown: lost before the poller identified it",
            err,
        )

    def _gpu_lost(self, session: Session, device: Device, err: Exception) -> None:
        self._mark_lost(device.gpu.index, device.gpu, err)
        session.devices.remove(device)
        if device.gpm is not None:
            device.gpm.free()
            device.gpm = None
        self._schedule_reinit()

    def _schedule_reinit(self) -> None:
        if not self._reinit_wanted:
            self._reinit_wanted = True
            self._next_attempt = self._clock() + self._backoff.next_delay()

    def _session_broken(self, err: Exception) -> None:
        self._counters.record_failure("query")
        self._log_down(f"NVML stopped answering ({err})")
        with self.session_lock:
            self._shutdown_locked()
        self._next_attempt = self._clock() + self._backoff.next_delay()

    def _log_down(self, why: str) -> None:
        if not self._down_logged:
            self._down_logged = True
            LOG.warning("%s; reporting NVML down and retrying with backoff (logged once until it recovers)", why)
        else:
            LOG.debug("%s", why)

    # -- init and shutdown ------------------------------------------------------------------

    def _initialize(self) -> None:
        nvml = self._nvml
        with self.session_lock:
            self._shutdown_locked()
            self._reinit_wanted = False
            try:
                nvml.nvmlInit()
            except nvml.NVMLError as err:
                self._init_failed(f"NVML init failed ({err})")
                return
            try:
                session, complete = self._enumerate()
            except nvml.NVMLError as err:
                self._try_shutdown()
                self._init_failed(f"NVML device enumeration failed ({err})")
                return
            self._session = session
        if complete:
            self._backoff.reset()
        else:
            self._schedule_reinit()
        if self._down_logged:
            LOG.info("NVML is back")
        self._down_logged = False
        LOG.info(
            "NVML up: driver %s, NVML %s, CUDA %s, %d GPU(s) answering: %s",
            session.driver.driver_version,
            session.driver.nvml_version,
            session.driver.cuda_driver_version,
            len(session.devices),
            ", ".join(f"{d.gpu.index}={d.gpu.uuid}" for d in session.devices) or "none",
        )

    def _init_failed(self, why: str) -> None:
        self._counters.record_failure("init")
        self._log_down(why)
        self._next_attempt = self._clock() + self._backoff.next_delay()

    def _enumerate(self) -> tuple[Session, bool]:
        """A new session over every GPU that answers, and whether every GPU did."""
        devices: list[Device] = []
        try:
            return self._enumerate_into(devices)
        except BaseException:
            for device in devices:  # a failed enumeration keeps no GPM samples
                if device.gpm is not None:
                    device.gpm.free()
            raise

    def _enumerate_into(self, devices: list[Device]) -> tuple[Session, bool]:
        nvml = self._nvml
        count = nvml.nvmlDeviceGetCount()
        complete = True
        gpm = self._gpm_functions()
        gpm_unsupported: list[GpuIdentity] = []
        for index in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                gpu = GpuIdentity(index, nvml.nvmlDeviceGetUUID(handle), nvml.nvmlDeviceGetName(handle))
            except nvml.NVMLError as err:
                if err.value in SESSION_CODES:
                    raise
                complete = False
                if err.value in LOST_CODES:
                    self._mark_lost(index, self._known.get(index) or unidentified_gpu(index), err)
                else:
                    self._counters.record_failure("query")
                    LOG.warning("GPU %d: skipped until the next re-initialisation (%s)", index, err)
                continue
            if index in self._lost:
                LOG.info("GPU %d (%s) answers again", index, gpu.uuid)
                del self._lost[index]
            self._known[index] = gpu
            self._counters.register_gpu(gpu)
            readings = Readings()
            device = Device(gpu, handle, readings, self._bind_calls(handle, readings))
            device.drop_calls([])  # the readings of fields the driver lacks are absent
            devices.append(device)
            if gpm is not None:
                device.gpm = self._bind_gpm(gpm, device, gpm_unsupported)
            if self._in_mig_mode(device):
                migs = self._mig_devices(device, gpm)
                device.mig_layout = tuple((mig.gpu.mig.slot, mig.gpu.uuid) for mig in migs if mig.gpu.mig)
                devices += migs
        new_unsupported = [gpu for gpu in gpm_unsupported if gpu.uuid not in self._gpm_unsupported_logged]
        if new_unsupported:
            self._gpm_unsupported_logged.update(gpu.uuid for gpu in new_unsupported)
            LOG.info(
                "GPM profiling metrics (SM, tensor, DRAM activity, PCIe/NVLink traffic) are not supported "
                "on %s; omitted there",
                ", ".join(f"GPU {gpu.index} ({gpu.name}, {gpu.uuid})" for gpu in new_unsupported),
            )
        session = Session(
            driver=self._driver_info(),
            devices=devices,
            gpus_by_handle={handle_address(d.handle): d.gpu for d in devices if d.gpu.mig is None},
            enumerated=count,
        )
        return session, complete

    # -- MIG --------------------------------------------------------------------------------

    def _in_mig_mode(self, device: Device) -> bool:
        """Whether the GPU is in MIG mode now (False where the driver or GPU has no MIG)."""
        nvml = self._nvml
        try:
            current, _pending = nvml.nvmlDeviceGetMigMode(device.handle)
        except nvml.NVMLError as err:
            if err.value in SESSION_CODES:
                raise
            if err.value not in UNSUPPORTED_CODES:
                LOG.debug("GPU %d (%s): nvmlDeviceGetMigMode failed (%s)", device.gpu.index, device.gpu.uuid, err)
            return False
        return bool(current == pynvml.NVML_DEVICE_MIG_ENABLE)

    def _mig_handles(self, parent: Device) -> list[tuple[int, Any, str]]:
        """(slot, handle, UUID) of every MIG device the GPU holds now."""
        nvml = self._nvml
        found: list[tuple[int, Any, str]] = []
        for slot in range(nvml.nvmlDeviceGetMaxMigDeviceCount(parent.handle)):
            try:
                handle = nvml.nvmlDeviceGetMigDeviceHandleByIndex(parent.handle, slot)
                found.append((slot, handle, nvml.nvmlDeviceGetUUID(handle)))
            except nvml.NVMLError as err:
                if err.value in SESSION_CODES:
                    raise
                if err.value not in MIG_GONE_CODES:  # NOT_FOUND: an empty slot
                    LOG.debug("GPU %d: MIG slot %d not read (%s)", parent.gpu.index, slot, err)
        return found

    def _mig_devices(self, parent: Device, gpm: GpmFunctions | None) -> list[Device]:
        """The parent's MIG devices, each a Device of its own (memory and GPM calls only)."""
        nvml = self._nvml
        try:
            handles = self._mig_handles(parent)
        except nvml.NVMLError as err:
            if err.value in SESSION_CODES:
                raise
            LOG.warning("GPU %d (%s): its MIG devices could not be listed (%s)", parent.gpu.index, parent.gpu.uuid, err)
            return []
        gpm_supported = gpm is not None and gpm.mig_sample_get is not None and gpm.device_support(parent.handle)[1]
        devices: list[Device] = []
        for slot, handle, uuid in handles:
            try:
                gpu = GpuIdentity(parent.gpu.index, uuid, parent.gpu.name, self._mig_info(parent, slot, handle))
            except nvml.NVMLError as err:
                if err.value in SESSION_CODES:
                    raise
                LOG.info("GPU %d MIG device %d (%s) not read (%s)", parent.gpu.index, slot, uuid, err)
                continue
            readings = Readings()
            calls: list[FieldCall] = []
            for call in MIG_CALLS:
                with contextlib.suppress(FunctionMissingError):  # an older driver: the field is left out
                    calls.append(call.bind(nvml.nvmlLib, handle, readings))
            device = Device(gpu, handle, readings, calls)
            device.drop_calls([])
            if gpm is not None and gpm_supported and gpu.mig is not None:
                totals = self._gpm_totals.setdefault(uuid, {})
                instance = gpu.mig.gpu_instance_id
                try:
                    device.gpm = GpmReader(
                        gpm, parent.handle, gpu, totals, self._counters, self._clock, gpu_instance_id=instance
                    )
                except (GpmAllocationError, FunctionMissingError) as err:
                    LOG.warning("GPU %s (%s): GPM not read (%s)", gpu.gpu_id, uuid, err)
            devices.append(device)
        if devices:
            LOG.info(
                "GPU %d (%s) in MIG mode: %s",
                parent.gpu.index,
                parent.gpu.uuid,
                ", ".join(f"{d.gpu.gpu_id}={d.gpu.uuid} ({d.gpu.mig.profile if d.gpu.mig else ''})" for d in devices),
            )
        return devices

    def _mig_info(self, parent: Device, slot: int, handle: Any) -> MigInfo:
        nvml = self._nvml
        name = str(nvml.nvmlDeviceGetName(handle))
        instance = int(nvml.nvmlDeviceGetGpuInstanceId(handle))
        compute_slices: int | None = None
        memory_mb = 0
        try:
            attributes = nvml.nvmlDeviceGetAttributes(handle)
            compute_slices, memory_mb = int(attributes.computeInstanceSliceCount), int(attributes.memorySizeMB)
        except nvml.NVMLError as err:
            if err.value in SESSION_CODES:
                raise
        # NVML names a MIG device "<parent's name> MIG <profile>" (e.g. "... MIG 1g.10gb").
        profile = name.rpartition(" MIG ")[2] if " MIG " in name else ""
        if compute_slices is None:
            compute_slices = catalog.mig_profile_compute_slices(profile)
        if not profile and compute_slices is not None:
            profile = f"{compute_slices}g.{round(memory_mb / 1024)}gb"
        share = min(max((compute_slices or 0) / catalog.MIG_COMPUTE_SLICES, 0.0), 1.0)
        return MigInfo(slot, parent.gpu.uuid, profile, instance, share)

    def _refresh_migs(self, session: Session, parent: Device) -> None:
        """List the parent's MIG devices again; a changed set replaces its MIG devices."""
        nvml = self._nvml
        try:
            layout = tuple((slot, uuid) for slot, _, uuid in self._mig_handles(parent))
        except nvml.NVMLError as err:
            if err.value in SESSION_CODES:
                raise SessionBrokenError(str(err)) from err
            return  # the parent's own reading decides (a lost GPU is counted there)
        if layout == parent.mig_layout:
            return
        old = [d for d in session.devices if d.gpu.mig is not None and d.gpu.mig.parent_uuid == parent.gpu.uuid]
        for device in old:
            self._drop(session, device)
        try:
            migs = self._mig_devices(parent, self._gpm_functions())
        except nvml.NVMLError as err:
            raise SessionBrokenError(str(err)) from err
        position = session.devices.index(parent) + 1
        session.devices[position:position] = migs
        parent.mig_layout = tuple((d.gpu.mig.slot, d.gpu.uuid) for d in migs if d.gpu.mig is not None)
        LOG.info(
            "GPU %d (%s): MIG devices reconfigured (%d before, %d now)",
            parent.gpu.index,
            parent.gpu.uuid,
            len(old),
            len(migs),
        )

    def _drop(self, session: Session, device: Device) -> None:
        if device in session.devices:
            session.devices.remove(device)
        if device.gpm is not None:
            device.gpm.free()
            device.gpm = None

    def _mig_gone(self, session: Session, device: Device) -> None:
        """A MIG device stopped answering: drop it and list its parent's MIG devices at the next pass."""
        assert device.gpu.mig is not None
        self._drop(session, device)
        for parent in session.devices:
            if parent.gpu.mig is None and parent.gpu.uuid == device.gpu.mig.parent_uuid:
                parent.mig_layout = ()
        LOG.info(
            "MIG device %s (%s) no longer answers; its parent's MIG devices are listed again",
            device.gpu.gpu_id,
            device.gpu.uuid,
        )

    def _gpm_functions(self) -> GpmFunctions | None:
        try:
            return GpmFunctions(self._nvml.nvmlLib)
        except FunctionMissingError:
            if not self._gpm_missing_logged:
                self._gpm_missing_logged = True
                LOG.info(
                    "this driver's NVML has no GPM (%s: Function Not Found); GPM profiling metrics omitted",
                    ", ".join(GPM_FUNCTION_NAMES),
                )
            return None

    def _bind_gpm(self, gpm: GpmFunctions, device: Device, unsupported: list[GpuIdentity]) -> GpmReader | None:
        """The GPU's GPM reader, or None (added to `unsupported` when the GPU says no)."""
        gpu = device.gpu
        code, supported = gpm.device_support(device.handle)
        if code in SESSION_CODES:
            raise self._nvml.NVMLError(code)
        if not supported:
            if code == 0 or code in UNSUPPORTED_CODES:
                unsupported.append(gpu)
            else:
                self._counters.record_failure("query")
                LOG.warning(
                    "GPU %d (%s): nvmlGpmQueryDeviceSupport failed (%s); GPM metrics omitted until NVML re-initialises",
                    gpu.index,
                    gpu.uuid,
                    self._nvml.NVMLError(code),
                )
            return None
        totals = self._gpm_totals.setdefault(gpu.uuid, {})
        try:
            return GpmReader(gpm, device.handle, gpu, totals, self._counters, self._clock)
        except GpmAllocationError as err:
            self._counters.record_failure("query")
            LOG.warning("GPU %d (%s): %s; GPM metrics omitted until NVML re-initialises", gpu.index, gpu.uuid, err)
            return None

    def _bind_calls(self, handle: Any, readings: Readings) -> list[FieldCall]:
        """The pass's NVML calls for one GPU (see nvml_calls), less those the driver lacks."""
        calls: list[FieldCall] = []
        for field in FIELDS:
            try:
                calls.append(field.bind(self._nvml.nvmlLib, handle, readings))
            except FunctionMissingError as err:
                if str(err) not in self._logged_missing:
                    self._logged_missing.add(str(err))
                    LOG.info("this driver's NVML has no %s (Function Not Found); that field is omitted", err)
        return calls

    def _driver_info(self) -> DriverInfo:
        def text(read: Callable[[], Any]) -> str:
            try:
                return str(read())
            except self._nvml.NVMLError:
                return ""

        nvml = self._nvml
        cuda = text(nvml.nvmlSystemGetCudaDriverVersion)
        return DriverInfo(
            driver_version=text(nvml.nvmlSystemGetDriverVersion),
            nvml_version=text(nvml.nvmlSystemGetNVMLVersion),
            cuda_driver_version=_cuda_version_text(int(cuda)) if cuda else "",
        )

    def _shutdown_locked(self) -> None:
        session = self._session
        if session is None:
            return
        self._session = None
        for device in session.devices:  # GPM samples go back before NVML shuts down
            if device.gpm is not None:
                device.gpm.free()
                device.gpm = None
        if session.event_set is not None:
            try:
                self._nvml.nvmlEventSetFree(session.event_set)
            except self._nvml.NVMLError as err:
                LOG.debug("freeing the NVML event set failed: %s", err)
            session.event_set = None
        self._try_shutdown()

    def _try_shutdown(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError as err:
            LOG.debug("nvmlShutdown failed: %s", err)

    def close(self) -> None:
        """Shut NVML down (at process exit)."""
        with self.session_lock:
            self._shutdown_locked()
