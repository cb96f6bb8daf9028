"""The CUDA branch of calibrate without a GPU: the timer and device queries go through `calibrate.measure.backends`, and a
fake CUDA module / backend records what they ask of it (events, synchronize, the L2 flush, memory, SDPA kernels)."""

from __future__ import annotations

import types

import pytest

torch = pytest.importorskip("torch")

from rooflinesim.calibrate.measure import bench  # noqa: E402
from rooflinesim.calibrate.measure.backends import CpuBackend, CudaBackend, DeviceBackend  # noqa: E402
from rooflinesim.calibrate.measure.timers import Timer, cuda_device  # noqa: E402
from rooflinesim.units import MIB  # noqa: E402


class FakeCuda:
    """Stands in for `torch.cuda`: device properties, events with a scripted elapsed time, a call log."""

    def __init__(self, l2_bytes=60 * MIB, total_memory=141e9, name="NVIDIA H200", elapsed_ms=2.0):
        self.log: list[str] = []
        self.props = types.SimpleNamespace(name=name, L2_cache_size=l2_bytes, total_memory=total_memory)
        self.elapsed_ms = elapsed_ms
        fake = self

        class Event:
            def __init__(self, enable_timing=False):
                assert enable_timing, "timing events must be created with enable_timing=True"
                self.recorded = False

            def record(self):
                fake.log.append("record")
                self.recorded = True

            def elapsed_time(self, end):
                assert self.recorded and end.recorded
                assert fake.log[-1] == "synchronize", "events read before the device was synchronised"
                fake.log.append("elapsed")
                return fake.elapsed_ms

        self.Event = Event

    def get_device_properties(self, index):
        self.log.append(f"properties {index}")
        return self.props

    def synchronize(self, index=None):
        self.log.append("synchronize")


class FakeSdp:
    def flash_sdp_enabled(self):
        return False

    def mem_efficient_sdp_enabled(self):
        return True

    def math_sdp_enabled(self):
        return True


def _cuda(**kwargs):
    fake = FakeCuda(**kwargs)
    return fake, CudaBackend(0, cuda=fake, sdp=FakeSdp())


def test_both_backends_satisfy_the_protocol():
    _, cuda = _cuda()
    assert isinstance(CpuBackend(), DeviceBackend) and isinstance(cuda, DeviceBackend)


def test_cuda_timer_flushes_l2_records_events_and_synchronizes_before_reading():
    fake, backend = _cuda(l2_bytes=60 * MIB, elapsed_ms=2.5)
    device = cuda_device(backend)
    timer = Timer(device)
    # the flush buffer: twice the device's L2, from its properties
    assert timer._flush_buffer.numel() * timer._flush_buffer.element_size() == 2 * 60 * MIB
    flushes = []
    buffer = timer._flush_buffer
    timer._flush_buffer = types.SimpleNamespace(zero_=lambda: (flushes.append(1), fake.log.append("flush")))
    calls = []
    fake.log.clear()
    timing = timer.time(lambda: (calls.append(1), fake.log.append("call")), min_calls=4, min_time_s=0.0,
                        warmup_s=0.0, warmup_calls=1)
    assert timing.samples == (2.5e-3,) * 4  # elapsed ms -> s
    assert len(calls) == 5 and len(flushes) == 4  # one warm-up call (unflushed), then flushed timed calls
    timed = fake.log[fake.log.index("flush"):]
    assert timed == ["flush", "record", "call", "record", "synchronize", "elapsed"] * 4
    del buffer


def test_cuda_timer_runs_before_between_the_flush_and_the_timed_call():
    fake, backend = _cuda()
    timer = Timer(cuda_device(backend))
    timer._flush_buffer = types.SimpleNamespace(zero_=lambda: fake.log.append("flush"))
    fake.log.clear()
    timer.time(lambda: fake.log.append("call"), min_calls=2, min_time_s=0.0, warmup_s=0.0, warmup_calls=1,
               before=lambda: fake.log.append("before"))
    timed = fake.log[fake.log.index("flush"):]
    assert fake.log[:2] == ["before", "call"]  # the warm-up call is preceded too
    assert timed == ["flush", "before", "record", "call", "record", "synchronize", "elapsed"] * 2


def test_cpu_timer_runs_before_untimed_ahead_of_every_call():
    import time

    from rooflinesim.calibrate.measure.timers import select_device

    log = []
    timer = Timer(select_device("cpu"), flush_l2=False)
    timing = timer.time(lambda: log.append("call"), min_calls=5, min_time_s=0.0, max_calls=5, warmup_s=0.0,
                        warmup_calls=2, before=lambda: (log.append("before"), time.sleep(0.01)))
    assert log == ["before", "call"] * 7  # two warm-up calls, five timed ones, each preceded by `before`
    assert len(timing.samples) == 5 and max(timing.samples) < 0.005  # its 10 ms sleep is not in the calls' times


def test_small_l2_still_gets_a_16_mib_flush_buffer():
    _, backend = _cuda(l2_bytes=4 * MIB)
    timer = Timer(cuda_device(backend))
    assert timer._flush_buffer.numel() * 4 == 16 * MIB


def test_cuda_device_and_profile_fields_come_from_the_device_properties():
    fake, backend = _cuda(l2_bytes=50 * MIB, total_memory=80e9, name="NVIDIA H100 80GB HBM3")
    device = cuda_device(backend)
    assert device.is_cuda and device.name == "NVIDIA H100 80GB HBM3" and device.l2_bytes == 50 * MIB
    assert device.slug == "nvidia-h100-80gb-hbm3"
    assert bench._memory_capacity(device) == 80e9 and bench._llc_bytes(device) == 50 * MIB
    assert bench._base_hardware(device) == "h100"
    assert backend.sdpa_kernels() == ("mem_efficient", "math")
    assert "properties 0" in fake.log


def test_cpu_backend_times_with_the_wall_clock_and_reports_host_figures():
    cpu = CpuBackend()
    assert not cpu.has_events() and cpu.flush_buffer(1 << 20) is None and cpu.l2_bytes() == 0
    assert cpu.total_memory_bytes() > 1e8 and cpu.last_level_cache_bytes() > 0
    assert cpu.sdpa_kernels()[0].startswith("cpu-")
    with pytest.raises(RuntimeError):
        cpu.new_event()


def test_cpu_pressure_is_read_from_psi(tmp_path):
    psi = tmp_path / "cpu"
    psi.write_text("some avg10=37.50 avg60=20.00 avg300=10.00 total=123\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    assert bench.get_cpu_pressure(str(psi)) == pytest.approx(0.375)
    assert bench.get_cpu_pressure(str(tmp_path / "missing")) is None


def test_host_memory_is_kept_through_glibc_mallopt_and_a_missing_glibc_changes_nothing(monkeypatch):
    from rooflinesim.calibrate.measure import timers

    calls = []

    class FakeLibc:
        def mallopt(self, param, value):
            calls.append((param, value))
            return 1

    monkeypatch.setattr(timers.ctypes, "CDLL", lambda name: FakeLibc())
    assert timers.keep_freed_host_memory() is True
    # M_MMAP_THRESHOLD (-3) at glibc's 32 MiB maximum, M_TRIM_THRESHOLD (-1) at 1 GiB
    assert calls == [(-3, 32 << 20), (-1, 1 << 30)]
    assert timers.select_device("cpu").host_memory_kept

    def no_glibc(name):
        raise OSError("not found")

    monkeypatch.setattr(timers.ctypes, "CDLL", no_glibc)
    assert timers.keep_freed_host_memory() is False
    assert not timers.select_device("cpu").host_memory_kept
