"""Tensor-parallel collectives: the algorithm an engine runs for a message size and TP degree, and its time.

Decode all-reduces are small (B x hidden x 2 bytes: 16 KB for Llama-3.1-8B at batch 1), so their cost is latency,
not bandwidth, and engines do not use a plain ring for them: vLLM and SGLang run a custom one-shot / two-shot
all-reduce over NVLink peer-to-peer (one kernel, one barrier per phase), TensorRT-LLM the same idea, PyTorch's
intra-node comm (gpt-fast) too; above a size limit they fall back to NCCL. Per collective instance, over N devices
and a message of M bytes:

    ring (NCCL):  base + 2 (N - 1) x step latency + 2 (N - 1) / N x M / (link bandwidth x fraction x protocol share)
                  (low-latency protocol: a quarter of the link; bulk protocol: larger latencies, the whole link)
    one-shot:     a + (N - 1) x M / B_p2p              (each device reads every peer's whole buffer)
    two-shot:     2 a + 2 (N - 1) / N x M / B_p2p      (reduce-scatter, all-gather: two barriers)

with a = latency + (N - 1) x latency per peer. All-gather: ring base + (N - 1) steps + (N - 1) / N x M / link, or
one direct pull a + (N - 1) / N x M / B_p2p. The engine's picker (vLLM's and SGLang's size thresholds, TensorRT-LLM's
strategy table, NCCL's tuner) is modelled as the fastest eligible algorithm: p2p only up to its max bytes and max
devices. So the algorithm moves with M and N. The latencies and bandwidths are in each hardware spec's
`interconnect` block with their sources (the ring's are NCCL's own tuning-model constants).
"""

from __future__ import annotations

import numpy as np

from ..ops.op_cost import OpCost
from ..specs.hardware import HardwareSpec, Interconnect
from ..errors import InputError
from .base import OpTime

ALGORITHMS = ("ring", "one-shot", "two-shot")


#: NCCL's low-latency protocol (LL) sends 8-byte flag+data words, and its tuning model counts a quarter of the bus
#: bandwidth for an all-reduce and a third for an all-gather (NVIDIA/nccl src/graph/tuning.cc @01afd20).
LL_BANDWIDTH_SHARE = {"allreduce": 1 / 4, "allgather": 1 / 3}


def _ring(ic: Interconnect, kind: str, message: np.ndarray, steps: float, share: float, link_fraction: float):
    """NCCL's ring: the low-latency protocol, or (when the spec gives its latencies) the bulk protocol at the full
    link bandwidth, whichever is faster for the message, as NCCL's tuner picks."""
    link = ic.bandwidth_bytes_per_s_per_direction * link_fraction
    latency = np.full(message.shape, ic.ring_base_latency_s + steps * ic.latency_s)
    if ic.ring_bulk_base_latency_s is None or ic.ring_bulk_latency_s is None:  # version-1 spec: one protocol
        return latency, share * message / link
    transfer = share * message / (link * LL_BANDWIDTH_SHARE[kind])
    bulk_latency = ic.ring_bulk_base_latency_s + steps * ic.ring_bulk_latency_s
    bulk_transfer = share * message / link
    faster = bulk_latency + bulk_transfer < latency + transfer
    return np.where(faster, bulk_latency, latency), np.where(faster, bulk_transfer, transfer)


def get_collective_parts(ic: Interconnect, kind: str, devices: int, message_bytes, link_fraction: float = 1.0
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(latency s, transfer s, algorithm index into ALGORITHMS) of one collective instance, arrays over messages."""
    n = float(devices)
    message = np.asarray(message_bytes, dtype=float)
    if kind == "allreduce":
        latency, transfer = _ring(ic, kind, message, 2 * (n - 1), 2 * (n - 1) / n, link_fraction)
    else:
        latency, transfer = _ring(ic, kind, message, n - 1, (n - 1) / n, link_fraction)
    algorithm = np.zeros(message.shape, dtype=np.int64)
    p2p = ic.peer_to_peer_allreduce
    if p2p is None or devices > p2p.max_devices or devices < 2:
        return latency, transfer, algorithm
    a = p2p.latency_s + (n - 1) * p2p.latency_per_peer_s
    eligible = message <= p2p.max_bytes
    if kind == "allreduce":
        candidates = [(1, a, (n - 1) * message / p2p.bandwidth_bytes_per_s),
                      (2, 2 * a, 2 * (n - 1) / n * message / p2p.bandwidth_bytes_per_s)]
    else:  # a direct pull of every peer's shard is the one-shot of an all-gather
        candidates = [(1, a, (n - 1) / n * message / p2p.bandwidth_bytes_per_s)]
    # the engine's choice by message size and TP degree is modelled as its tuned picker: the fastest eligible one
    for index, cand_latency, cand_transfer in candidates:
        faster = eligible & (cand_latency + cand_transfer < latency + transfer)
        latency = np.where(faster, cand_latency, latency)
        transfer = np.where(faster, cand_transfer, transfer)
        algorithm = np.where(faster, index, algorithm)
    return latency, transfer, algorithm


def _get_point_collective_parts(ic: Interconnect, kind: str, devices: int, message: np.float64,
                                link_fraction: float) -> tuple[np.float64, np.float64, int]:
    """`get_collective_parts` for one message (a float64 scalar): the same arithmetic and the same choices, without
    an array evaluation per term."""
    n = float(devices)
    steps, share = (2 * (n - 1), 2 * (n - 1) / n) if kind == "allreduce" else (n - 1, (n - 1) / n)
    link = ic.bandwidth_bytes_per_s_per_direction * link_fraction
    latency = ic.ring_base_latency_s + steps * ic.latency_s
    if ic.ring_bulk_base_latency_s is None or ic.ring_bulk_latency_s is None:
        transfer = share * message / link
    else:
        transfer = share * message / (link * LL_BANDWIDTH_SHARE[kind])
        bulk_latency = ic.ring_bulk_base_latency_s + steps * ic.ring_bulk_latency_s
        bulk_transfer = share * message / link
        if bulk_latency + bulk_transfer < latency + transfer:
            latency, transfer = bulk_latency, bulk_transfer
    algorithm = 0
    p2p = ic.peer_to_peer_allreduce
    if p2p is None or devices > p2p.max_devices or devices < 2:
        return np.float64(latency), np.float64(transfer), algorithm
    a = p2p.latency_s + (n - 1) * p2p.latency_per_peer_s
    if kind == "allreduce":
        candidates = [(1, a, (n - 1) * message / p2p.bandwidth_bytes_per_s),
                      (2, 2 * a, 2 * (n - 1) / n * message / p2p.bandwidth_bytes_per_s)]
    else:
        candidates = [(1, a, (n - 1) / n * message / p2p.bandwidth_bytes_per_s)]
    for index, cand_latency, cand_transfer in candidates:
        if message <= p2p.max_bytes and cand_latency + cand_transfer < latency + transfer:
            latency, transfer, algorithm = cand_latency, cand_transfer, index
    return np.float64(latency), np.float64(transfer), algorithm


def get_collective_algorithm(hw: HardwareSpec, kind: str, devices: int, message_bytes) -> np.ndarray:
    """The algorithm name the model picks for each message size (an array of strings)."""
    _, _, index = get_collective_parts(_interconnect(hw), kind, devices, message_bytes,
                                       hw.efficiency.interconnect_fraction)
    return np.asarray(ALGORITHMS)[index]


def _interconnect(hw: HardwareSpec) -> Interconnect:
    if hw.interconnect is None:
        raise InputError(f"{hw.name} has no interconnect in its spec: tensor parallelism cannot be modelled")
    return hw.interconnect


def get_collective_time(op: OpCost, hw: HardwareSpec, bandwidth_fraction: float = 1.0) -> OpTime:
    """All `op.count` instances of an all-reduce / all-gather of `op.comm_bytes` over `op.dims['devices']`.

    The bandwidth fraction scales the ring's link bandwidth (the p2p bandwidths are achieved figures already);
    latency is reported as overhead, the bytes' time as memory time."""
    if type(op.comm_bytes) is np.float64:  # one point (`ops.op_cost.make_op`)
        latency, transfer, _ = _get_point_collective_parts(_interconnect(hw), op.kind, int(op.dims["devices"]),
                                                           op.comm_bytes, bandwidth_fraction)
        latency, transfer = op.count * latency, op.count * transfer
        return OpTime(np.float64(0.0), transfer, latency, transfer + latency, np.False_)
    latency, transfer, _ = get_collective_parts(_interconnect(hw), op.kind, int(op.dims["devices"]), op.comm_bytes,
                                                bandwidth_fraction)
    latency, transfer = op.count * latency, op.count * transfer
    zero = np.zeros_like(transfer)
    return OpTime(zero, transfer, latency, transfer + latency, zero.astype(bool))


__all__ = ["ALGORITHMS", "get_collective_parts", "get_collective_algorithm", "get_collective_time"]
