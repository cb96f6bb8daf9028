"""The calibration microbenchmarks (torch), one module per benchmark family.

Each family module turns the `Plan` into `Job`s (a measurement key and a callable that times it) on a shared
`BenchContext` (device, dtype, timer and the cold-weight pool, in `base`):

* `bandwidth`: streaming copy and weight-streaming GEMV bandwidth, and the drift-reference GEMV;
* `linear`: F.linear time vs M over the calibrated weight shapes, with cold (rotated) weights;
* `attention`: the decoder's masked SDPA vs batch, context and query tokens;
* `elementwise`: the decoder's elementwise building blocks vs size;
* `decoder`: whole synthetic decoders as forward passes (dispatch overheads and the in-model scale);
* `cache`: the same GEMV over growing weight working sets (cache reuse);
* `linear.warm_linear_jobs`: small F.linear shapes vs M with their weights warm in the last-level cache;
* `sampler`: the sampler and the exact acceptance rule a speculative loop runs after its forward passes;
* `implementation`: what other implementations do beyond the reference decoder (a concatenating KV cache, aten
  dispatch per call).

`JOB_FAMILIES` lists the job builders in the order a run collects them (that order seeds the shuffle).
"""

from __future__ import annotations

from . import attention, cache, decoder, elementwise, implementation, linear, sampler
from .base import BenchContext, Job

#: the job builders of one dtype, in the order `calibrate.measure.bench.run_calibration` collects them
JOB_FAMILIES = (linear.linear_jobs, attention.attention_jobs, elementwise.elementwise_jobs, decoder.decoder_jobs,
                cache.cache_jobs, linear.warm_linear_jobs, sampler.sampler_jobs, implementation.implementation_jobs)

__all__ = ["BenchContext", "JOB_FAMILIES", "Job"]
