"""Validated specifications and where they come from.

- `base`: the pydantic base classes (frozen, strict, finite) and spec-file errors (`SpecError`).
- `hardware`: `HardwareSpec` (peaks, bandwidth, capacity, efficiencies, interconnect).
- `model`: `ModelSpec` (with nested MoE and MLA blocks).
- `workload`: `Workload`, the serving workload of one forward step.
- `measured`: the measured-profile block a calibrated `HardwareSpec` carries.
- `validation_report`: the schema of `rooflinesim validate` reports.
- `hf_config`: a Hugging Face `config.json` -> `ModelSpec`.
- `registry`: name, alias or path -> validated spec; close-name suggestions.
- `profiles`: measured profiles: load, apply to a device, write atomically.
"""
