"""The operations of one forward step: FLOPs and bytes per op. Knows transformers, not hardware.

- `op_cost`: `OpCost` and the primitives that build one op (linear, collective, attention geometry).
- `sections`: the sections of a step (embedding, attention, MLP, MoE, lm_head, sampler, collectives).
- `step_ops`: one step's ops for B sequences x q new tokens on S cached; KV-cache and activation bytes.
- `draft_heads`: the ops of draft heads (EAGLE / Medusa / MTP-style).
"""
