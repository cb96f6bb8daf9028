"""What the timers and device queries need from a device, behind one protocol (torch), so the CUDA branch is tested
without a GPU: `CpuBackend` (wall clock, /proc and sysfs), `CudaBackend` (CUDA events, synchronize, the device's
properties, an L2 flush buffer, the SDPA kernels enabled) and, in the tests, a fake that records the calls.

`CudaBackend` takes the `torch.cuda` module (and `torch.backends.cuda`) as arguments, so a test hands it stand-ins
with the same attributes and checks what it asks of them.
"""

from __future__ import annotations

import glob
from typing import Protocol, runtime_checkable

import torch

from ...units import GIB, KIB, MIB

#: fallback sizes when a device does not say (B)
DEFAULT_L2_BYTES = 50 * MIB
DEFAULT_LLC_BYTES = 32 * MIB
DEFAULT_MEMORY_BYTES = 16e9


class DeviceEvent(Protocol):
    def record(self) -> None: ...

    def elapsed_time(self, end: "DeviceEvent") -> float:
        """Milliseconds from this event to `end` (both recorded and synchronised)."""
        ...


@runtime_checkable
class DeviceBackend(Protocol):
    """The device queries and timing primitives calibrate uses."""

    kind: str  # "cpu" | "cuda"

    def synchronize(self) -> None: ...

    def has_events(self) -> bool:
        """True: time calls with device events (asynchronous devices); False: the host's wall clock."""
        ...

    def new_event(self) -> DeviceEvent: ...

    def flush_buffer(self, nbytes: int):
        """A device buffer whose `zero_()` evicts the last-level cache between calls (None: nothing to flush)."""
        ...

    def l2_bytes(self) -> int: ...

    def last_level_cache_bytes(self) -> float: ...

    def total_memory_bytes(self) -> float: ...

    def sdpa_kernels(self) -> tuple[str, ...]:
        """The scaled-dot-product-attention kernels torch may pick on this device (recorded in the profile)."""
        ...


class CpuBackend:
    """The host CPU: wall-clock timing, nothing to synchronise or flush (the benchmarks rotate cold buffers)."""

    kind = "cpu"

    def synchronize(self) -> None:
        return None

    def has_events(self) -> bool:
        return False

    def new_event(self) -> DeviceEvent:
        raise RuntimeError("the CPU backend times with the wall clock, not events")

    def flush_buffer(self, nbytes: int):
        return None

    def l2_bytes(self) -> int:
        return 0

    def last_level_cache_bytes(self) -> float:
        best = 0.0
        for path in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*/size"):
            try:
                with open(path) as f:  # closed at once: an unclosed file warns on every calibrate run
                    text = f.read().strip().upper()
                value = float(text.rstrip("KMG")) * {"K": KIB, "M": MIB, "G": GIB}.get(text[-1], 1)
                best = max(best, value)
            except (OSError, ValueError):
                continue
        return best or DEFAULT_LLC_BYTES

    def total_memory_bytes(self) -> float:
        try:
            with open("/proc/meminfo") as f:
                for line in f:
                    if line.startswith("MemTotal:"):
                        return float(line.split()[1]) * KIB
        except OSError:
            pass
        return DEFAULT_MEMORY_BYTES

    def sdpa_kernels(self) -> tuple[str, ...]:
        """ATen's CPU kernels (SDPA's flash-CPU and math paths among them) are built for this vector capability."""
        capability = torch.backends.cpu.get_cpu_capability() if hasattr(torch.backends, "cpu") else "default"
        return (f"cpu-{capability.lower()}",)


class CudaBackend:
    """One CUDA device: events around each call, synchronize before reading them, an L2 flush buffer of twice the
    device's L2 (at least 16 MiB), memory and L2 size from the device properties."""

    kind = "cuda"

    def __init__(self, index: int, cuda=None, sdp=None):
        self.cuda = cuda if cuda is not None else torch.cuda
        self.sdp = sdp if sdp is not None else torch.backends.cuda
        self.index = index
        self.props = self.cuda.get_device_properties(index)
        self.torch_device = torch.device("cuda", index) if cuda is None else torch.device("cpu")

    @property
    def name(self) -> str:
        return str(self.props.name)

    def synchronize(self) -> None:
        self.cuda.synchronize(self.index)

    def has_events(self) -> bool:
        return True

    def new_event(self) -> DeviceEvent:
        return self.cuda.Event(enable_timing=True)

    def flush_buffer(self, nbytes: int):
        size = max(int(nbytes), 2 * self.l2_bytes(), 16 * MIB)
        return torch.empty(size // 4, dtype=torch.float32, device=self.torch_device)

    def l2_bytes(self) -> int:
        return int(getattr(self.props, "L2_cache_size", 0) or DEFAULT_L2_BYTES)

    def last_level_cache_bytes(self) -> float:
        return float(self.l2_bytes())

    def total_memory_bytes(self) -> float:
        return float(self.props.total_memory)

    def sdpa_kernels(self) -> tuple[str, ...]:
        checks = (("flash", "flash_sdp_enabled"), ("mem_efficient", "mem_efficient_sdp_enabled"),
                  ("cudnn", "cudnn_sdp_enabled"), ("math", "math_sdp_enabled"))
        return tuple(name for name, query in checks if hasattr(self.sdp, query) and getattr(self.sdp, query)())
