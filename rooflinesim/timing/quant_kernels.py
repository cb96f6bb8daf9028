"""Weight-only (and fp8) quantised linears as (format, kernel): the kernel decides how close to the bf16 GEMM's
efficiency the narrow weights stream and compute.

The datasheet roofline prices a linear at max(FLOPs / (peak x compute fraction), bytes / (bandwidth x memory
fraction)). A quantised kernel scales both fractions by its own efficiency relative to the bf16 kernel on the same
device, published as end-to-end effective bandwidth at batch 1 (model bytes x tokens/s) next to bf16's on the same
machine. Efficiency as a function of the batch tokens M follows from the roofline: int4 weights move a quarter of
bf16's bytes, so a linear stays memory-bound up to M ~ ridge / 4 (16-40 on A100/H100) and compute-bound beyond,
where the kernel's compute efficiency (and the 2 dequantisation FLOPs per weight the op list adds) decide; this is
Marlin's "close to ideal 4x up to batch 16-32" and tinygemm's slowness once compute-bound.

The measured timing model keeps its own stated rule for narrow weights (only the bytes change); kernels apply to
the datasheet model.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InputError

#: the kernel used when a spec names none for a weight dtype: dequantise-and-GEMM at the bf16 kernel's efficiency
GENERIC = "generic"


@dataclass(frozen=True)
class QuantKernel:
    name: str
    weight_dtypes: tuple[str, ...]
    memory_efficiency: float  # of the bf16 kernel's achieved bandwidth, in the memory-bound regime
    compute_efficiency: float  # of the bf16 kernel's achieved FLOP rate, in the compute-bound regime
    source: str
    # how far the kernel hides its math under its loads (None: the device's compute_memory_overlap)
    compute_memory_overlap: float | None = None


KERNELS: dict[str, QuantKernel] = {k.name: k for k in (
    QuantKernel(GENERIC, ("int8", "int4", "fp8"), 1.0, 1.0,
                "no kernel named: narrow weights stream and compute at the bf16 kernel's efficiency (the optimistic "
                "bound; what the tool priced before kernels were modelled)"),
    QuantKernel("tinygemm", ("int4",), 0.70, 0.70,
                "PyTorch's _weight_int4pack_mm (gpt-fast, torchao int4wo): effective bandwidth at batch 1 relative to "
                "bf16 on the same GPU, 862.69 / 1397.31 GB/s (Llama-2-7B, 8x A100, meta-pytorch/gpt-fast README "
                "@9599e04), 763.33 / 1435.54 (Llama-3-8B, A100) and 1019.14 / 1904.75 (Llama-3.1-8B, H100; "
                "pytorch/ao torchao/quantization/README.md @fd6e4b1): 0.617, 0.532, 0.535 of the whole model's bytes; "
                "fitted on the linears alone (median error 0 over those rows and Llama-2-7B int4wo-64 on A100, with "
                "this tool's specs; benchmarks/bench_published.py --fit): 0.70. The README warns int4 weight-only "
                "'can be very slow' when compute-bound, taken as the same 0.70 there"),
    QuantKernel("marlin", ("int4",), 1.0, 1.0,
                "IST-DASLab/marlin README @2f6d7c1: 'close to ideal (4x) speedups up to batchsizes of 16-32 tokens', "
                "the 3.87x of fp16 that the 0.125-bit group-scale overhead allows, i.e. the bf16 kernel's bandwidth "
                "efficiency on a quarter of the bytes; beyond, an fp16-class tensor-core GEMM plus dequantisation. "
                "Near-ideal speedup to 16-32 tokens means its loads hide the dequantisation and MMA: overlap 1",
                compute_memory_overlap=1.0),
    QuantKernel("int8-weight-only", ("int8",), 0.94, 0.94,
                "gpt-fast / torchao int8wo (torch.compile fused dequant + GEMV): 1069.20 / 1397.31 (Llama-2-7B, A100, "
                "gpt-fast README @9599e04), 1131.18 / 1418.93, 1150.80 / 1435.54 (A100) and 1495.41 / 1904.75 (H100; "
                "torchao README @fd6e4b1): 0.765, 0.797, 0.802, 0.785 of the whole model's bytes; fitted on the "
                "linears alone over those rows plus gpt-fast's Llama-3.1-8B int8 (137.64 tok/s; bench_published.py --fit): "
                "0.94"),
    QuantKernel("fp8-weight-only", ("fp8",), 0.89, 0.89,
                "torchao float8wo on H100, Llama-3.1-8B: 1339.93 / 1904.75 GB/s = 0.70 of the whole model's bytes "
                "(torchao README @fd6e4b1); fitted on the linears alone on that row (bench_published.py --fit): 0.89"),
    QuantKernel("fp8-rowwise", ("fp8",), 0.61, 0.61,
                "torchao float8dq per-row (fp8 activations and weights, rowwise scales) on H100, Llama-3.1-8B: "
                "1161.47 / 1904.75 GB/s = 0.61 at batch 1 (torchao README @fd6e4b1); the raw ratio, not fitted"),
)}


def get_quant_kernel(name: str, weight_dtype: str) -> QuantKernel:
    """The named kernel, checked against the weight dtype it is asked to run (InputError otherwise)."""
    kernel = KERNELS.get(str(name).strip().lower())
    if kernel is None:
        raise InputError(f"unknown quantised kernel {name!r}; use one of {', '.join(KERNELS)}")
    if weight_dtype not in kernel.weight_dtypes:
        raise InputError(f"kernel {kernel.name} runs {'/'.join(kernel.weight_dtypes)} weights, not {weight_dtype}")
    return kernel


__all__ = ["QuantKernel", "KERNELS", "GENERIC", "get_quant_kernel"]
