"""Measuring the local device and checking the model against it: `rooflinesim calibrate`, `validate`,
`validate --serve`, `acceptance measure` and `acceptance validate`. The command line (`rooflinesim.cli`) is the only
part of the package that imports from here, and only inside the commands that need it.

Five subpackages, split at the torch boundary and by job. `fitting` imports no torch (numpy, scipy and pydantic only;
`tests/test_layers.py` checks it); the other three need torch. Within calibrate, imports flow
`fitting -> reference -> measure -> validators -> external` (a subpackage imports only itself and those to its left).

| subpackage | module | what it does |
|---|---|---|
| `fitting` (no torch) | `plan` | what a run measures: shapes, grids, synthetic decoders, hold-out checks, the `Plan` |
| | `measurements` | the measurement keys, `Timing` and `Results` |
| | `budget` | sizing a run to a time budget from the device's probed speed |
| | `pacing` | a run behind its budget: run, hurry or skip the next job |
| | `fit` | least-squares primitives (roofline, affine) |
| | `fit_profile` | measurements of one dtype fitted into a `DtypeProfile` |
| | `merge` | `calibrate --merge`: profiles of one device pooled into one |
| | `holdout` | the seeded family of hold-out decoders `validate` measures |
| `reference` (torch) | `model` | the plain-torch Llama-style decoder that calibration and validation run |
| | `sampling` | token sampling and the exact speculative acceptance rule, batched |
| | `hf_checkpoint` | Hugging Face-layout checkpoints <-> the decoder of `model` |
| | `acceptance_models` | two small models trained on the spot, a draft partially agreeing with its target |
| | `serve_loop` | a continuous-batching serving loop over the reference decoders |
| `measure` (torch) | `backends` | the CPU and CUDA device backends behind one protocol |
| | `timers` | device selection and the timers |
| | `benchmarks/` | the microbenchmarks, one module per family (linear, attention, elementwise, decoder, ...) |
| | `probe` | a few short probes of the device's speed, for the budget |
| | `anchor` | the machine-speed anchors: is the machine as fast as when its profile was measured? |
| | `bench` | `rooflinesim calibrate`: runs the benchmarks and fits them into a measured profile |
| | `acceptance_measure` | `rooflinesim acceptance measure`: acceptance of a local draft / target checkpoint pair |
| `validators` | `validate` | `rooflinesim validate`: measured step times and speculative loop vs predictions |
| | `validate_family` | `validate`'s randomised hold-out family, measured and priced |
| | `validate_summary` | `validate`'s report: error summaries, coverage, writing, charting, printing (no torch) |
| | `serve_validate` | `rooflinesim validate --serve`: the measured serving loop vs the serving simulator |
| | `acceptance_validate` | `rooflinesim acceptance validate`: speculative speedup on real acceptance vs predicted |
| `external` | `hf_holdout` | the hold-out nobody in the project wrote: Hugging Face `transformers` decoders from configs |
| | `gptfast_model` | a second, independent decoder in gpt-fast's style (fused wqkv, `nn.RMSNorm`, native-GQA SDPA) |
| | `external_validate` | `rooflinesim validate --family hf,gptfast`: those families measured and priced |
| | `decompose` | torch.profiler per-op buckets of a hold-out step beside the tool's per-op prices |
| | `model_terms` | `rooflinesim calibrate --model`: a user's model's own terms on top of a device profile |

Profiles are read and written by `rooflinesim.specs.profiles` and priced by `rooflinesim.timing.measured`, on the
`predict` path; nothing here is needed to use a profile.
"""
