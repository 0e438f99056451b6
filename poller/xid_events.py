"""The XID event thread: counts every XID NVML reports, by GPU and XID code.

dcgm-exporter shows only the last XID as a gauge, so a repeated XID is invisible; here each event
increments `ml_gpu_xid_errors_total{xid=...}` (a code's series is created by its first occurrence)
and `ml_gpu_errors_total{error_type="xid"}` (exists at 0, so alerts see the first XID of any code).

The thread follows the source's NVML session: it registers an event set on a new session (GPUs
that do not support XID events are skipped), waits with a short timeout while holding the
source's `session_lock` (so re-initialisation never shuts NVML down under a wait) and sleeps
without it. The set is freed by the source when the session ends.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import pynvml

from poller.error_counters import ErrorCounters
from poller.nvml_source import LOST_CODES, UNSUPPORTED_CODES, NvmlSource, Session, handle_address

LOG = logging.getLogger(__name__)

XID_EVENT = pynvml.nvmlEventTypeXidCriticalError


class XidEventWatcher:
    def __init__(
        self,
        source: NvmlSource,
        counters: ErrorCounters,
        *,
        nvml: Any = pynvml,
        wait_ms: int = 200,
        idle_seconds: float = 1.0,
    ) -> None:
        self._source = source
        self._counters = counters
        self._nvml = nvml
        self._wait_ms = wait_ms
        self._idle_seconds = idle_seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nvml-xid-events", daemon=True)
        self._logged: set[str] = set()

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                waited = self._wait_once()
            except Exception:  # never let the thread die: log and carry on after a pause
                LOG.exception("XID event thread: unexpected error")
                self._counters.record_failure("event")
                waited = False
            # Always pause outside the lock: Python locks are not fair, and a re-initialisation
            # waiting for session_lock must get it between two waits.
            self._stop.wait(0.001 if waited else self._idle_seconds)

    def _wait_once(self) -> bool:
        """Wait for one event on the current session; False when there is nothing to wait on."""
        nvml = self._nvml
        with self._source.session_lock:
            session = self._source.session
            if session is None:
                return False
            if not session.events_registered:
                self._register(session)
            if session.event_set is None:
                return False
            try:
                data = nvml.nvmlEventSetWait_v2(session.event_set, self._wait_ms)
            except nvml.NVMLError as err:
                if err.value == nvml.NVML_ERROR_TIMEOUT:
                    return True
                self._counters.record_failure("event")
                self._log_once(f"wait:{err.value}", "waiting for NVML events failed (%s)", err)
                if err.value in LOST_CODES:
                    self._source.request_reinit()
                return False
            if data.eventType & XID_EVENT:
                gpu = session.gpus_by_handle.get(handle_address(data.device))
                if gpu is None:
                    self._counters.record_failure("event")
                    LOG.warning("XID %d on a GPU this session does not know; not counted", data.eventData)
                else:
                    self._counters.record_xid(gpu, int(data.eventData))
                    LOG.warning("XID %d on GPU %d (%s)", data.eventData, gpu.index, gpu.uuid)
            return True

    def _register(self, session: Session) -> None:
        """Create the session's event set and register every GPU that reports XID events."""
        nvml = self._nvml
        session.events_registered = True
        try:
            event_set = nvml.nvmlEventSetCreate()
        except nvml.NVMLError as err:
            if err.value not in UNSUPPORTED_CODES:
                self._counters.record_failure("event")
            self._log_once("create", "NVML events unavailable (%s); XID errors are not counted", err)
            return
        registered = 0
        for device in session.devices:
            if device.gpu.mig is not None:  # XID events come on the parent GPU
                continue
            try:
                if nvml.nvmlDeviceGetSupportedEventTypes(device.handle) & XID_EVENT:
                    nvml.nvmlDeviceRegisterEvents(device.handle, XID_EVENT, event_set)
                    registered += 1
            except nvml.NVMLError as err:
                if err.value not in UNSUPPORTED_CODES:
                    self._counters.record_failure("event")
                LOG.info("GPU %d (%s): XID events not registered (%s)", device.gpu.index, device.gpu.uuid, err)
        if registered:
            session.event_set = event_set
            LOG.info("watching XID events on %d GPU(s)", registered)
        else:
            try:
                nvml.nvmlEventSetFree(event_set)
            except nvml.NVMLError as err:
                LOG.debug("freeing an unused event set failed: %s", err)

    def _log_once(self, key: str, message: str, *args: object) -> None:
        if key in self._logged:
            LOG.debug(message, *args)
        else:
            self._logged.add(key)
            LOG.warning(message, *args)
