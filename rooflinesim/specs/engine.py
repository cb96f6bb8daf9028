"""An engine execution profile: what a serving engine adds to every iteration beyond the kernels' own work.

The step model prices kernels (FLOPs and bytes against a device's peaks). A real engine also pays, per iteration:

- `launch`: a fixed cost per kernel it launches, which depends on the engine's *mode* (a captured CUDA graph or
  eager launches), not on the GPU; how many kernels one decoder layer launches (its fusion); which batches its
  graphs cover (outside them the step runs eager);
- `host`: CPU time to schedule the iteration, prepare its inputs and process its outputs, as a constant + per
  sequence + per token, hidden under the GPU's work or not (an overlap scheduler);
- `speculative`: what a speculative iteration adds: an EAGLE-style draft-extend pass over the accepted tokens, the
  tree / verify bookkeeping and sampling / rejection kernels, proposer-scorer synchronisation, and whether the
  engine switches its overlap scheduler or chunked prefill off while speculating;
- `scheduling`: how `serve` forms steps for this engine (prefill-first or mixed chunked steps, multi-step
  scheduling, admission with or without eviction, the default token budget).

Every number names its source in `sources` (keyed by the dotted field name), as hardware specs do. The `ideal`
profile is all zeros and keeps the hardware spec's own per-kernel overhead: it prices bare kernels, the model
before engines existed. Files live in `engines/*.yaml` (`registry.load_engine`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from .base import SpecModel, StrTuple, field_error

#: the dotted fields every non-ideal profile must source (the numbers that move a price)
SOURCED_FIELDS = (
    "launch.kernel_s_graph", "launch.kernel_s_eager", "launch.kernels_per_layer", "launch.graph_max_batch",
    "host.constant_s", "host.per_sequence_s", "host.overlap",
    "speculative.disables_overlap", "speculative.draft_extend", "speculative.per_iteration_s",
    "scheduling.policy", "scheduling.max_num_batched_tokens",
)


class Launch(SpecModel):
    """Per-kernel cost in each launch mode and the CUDA-graph capture range."""

    use_hardware_overhead: bool = Field(
        default=False, description="price each op with the hardware spec's own kernel_overhead_s (the ideal "
                                   "profile: today's bare-kernel model); when false the engine's costs below "
                                   "replace it")
    kernel_s_graph: float = Field(default=0.0, ge=0, description="fixed time per kernel inside a captured graph (s)")
    kernel_s_eager: float = Field(default=0.0, ge=0, description="fixed time per kernel launched eagerly (s)")
    kernels_per_layer: float = Field(default=0.0, ge=0, description="kernels one decoder layer launches")
    kernels_outside_layers: float = Field(default=0.0, ge=0,
                                          description="kernels outside the layers: embedding, final norm, lm_head, "
                                                      "sampler")
    graph_max_batch: int = Field(default=0, ge=0, description="largest captured batch (sequences); 0: never captured")
    graph_max_query_tokens: int = Field(default=1, ge=1, description="largest query per sequence a captured graph "
                                                                     "covers (1: decode only; k + 1 for verify)")
    graph_max_tokens: int = Field(default=1 << 30, ge=1, description="largest batch x query a graph covers")


class Host(SpecModel):
    """CPU time per iteration: constant_s + per_sequence_s x B + per_token_s x B x q."""

    constant_s: float = Field(default=0.0, ge=0)
    per_sequence_s: float = Field(default=0.0, ge=0)
    per_token_s: float = Field(default=0.0, ge=0)
    frontend_s: float = Field(default=0.0, ge=0, le=60.0,
                              description="per-request latency before the scheduler sees a request (the API server's "
                                          "tokenization and hand-over to the engine process): serve adds it to "
                                          "TTFT and latency, not to any step")
    overlap: bool = Field(default=False, description="an overlap scheduler runs the host work of iteration i + 1 "
                                                     "under the GPU work of iteration i: only the excess shows")


class Speculative(SpecModel):
    """What one speculative iteration adds beyond k draft forwards and one verify forward."""

    disables_overlap: bool = Field(default=False, description="the overlap scheduler is off while speculating")
    disables_chunked_prefill: bool = Field(default=False, description="mixed chunked prefill is off while "
                                                                      "speculating")
    draft_extend: bool = Field(default=False, description="an EAGLE-style head runs one more pass over the accepted "
                                                          "tokens (k + 1 rows per sequence) to refresh its features")
    draft_softmax_topk: bool = Field(default=False, description="every draft forward of an EAGLE-style head "
                                                                "upcasts its logits to fp32, soft-maxes them and "
                                                                "takes the top-k over the head's vocabulary, "
                                                                "whatever the temperature (three kernels over "
                                                                "batch x width rows)")
    verify_batch_expansion: bool = Field(default=False, description="the verify runs as a decode batch of "
                                                                    "B x (1 + drafted) single-token sequences, each "
                                                                    "attending over its own context (KV read once "
                                                                    "per expanded row), inside the decode graphs")
    ngram_ops_per_sequence: float = Field(default=0.0, ge=0, description="torch ops an n-gram proposer runs one "
                                                                         "sequence at a time on the host, each at "
                                                                         "launch.kernel_s_eager (0: batched or free)")
    extra_kernels: float = Field(default=0.0, ge=0, description="tree building, verify, sampling and rejection "
                                                                "kernels per iteration, at the launch cost of the "
                                                                "verify's mode")
    per_iteration_s: float = Field(default=0.0, ge=0, description="host time per speculative iteration beyond the "
                                                                  "plain iteration's: proposer / scorer sync")
    per_sequence_s: float = Field(default=0.0, ge=0, description="host time per sequence per speculative iteration "
                                                                 "beyond the plain iteration's (accepting tokens)")
    output_per_sequence_s: float = Field(default=0.0, ge=0, description="host output processing per sequence of the "
                                                                        "batch per speculative iteration that the "
                                                                        "GPU waits for, because the engine runs it "
                                                                        "asynchronously only without speculation "
                                                                        "(never counted per expanded row)")


class Scheduling(SpecModel):
    """How `serve` forms this engine's steps."""

    policy: Literal["mixed", "prefill-first"] = Field(
        default="mixed", description="mixed: prefill chunks ride with the running decodes in one step (chunked "
                                     "prefill); prefill-first: a step with waiting prompts runs only prefills, "
                                     "stalling the decodes")
    multi_step: int = Field(default=1, ge=1, description="decode iterations scheduled at once (the host work is "
                                                         "paid once per multi_step iterations)")
    admission: Literal["evict", "no-evict"] = Field(
        default="evict", description="evict: admit while KV blocks are free, preempt when they run out; no-evict: "
                                     "admit only a request whose whole output fits (TensorRT-LLM "
                                     "GUARANTEED_NO_EVICT)")
    async_output: bool = Field(default=False, description="an asynchronous output processor streams a step's tokens "
                                                          "while the next step runs (vLLM V0 v0.6): they reach "
                                                          "the client one step later")
    max_num_batched_tokens: int = Field(default=8192, ge=1, description="default token budget per step")
    max_num_seqs: int = Field(default=256, ge=1, description="default running sequences at most")


class EngineSpec(SpecModel):
    schema_version: Literal[1]
    name: str
    aliases: StrTuple = ()
    version: str = Field(description="the engine version the numbers describe")
    description: str = ""
    launch: Launch = Field(default_factory=Launch)
    host: Host = Field(default_factory=Host)
    speculative: Speculative = Field(default_factory=Speculative)
    scheduling: Scheduling = Field(default_factory=Scheduling)
    sources: dict[str, str] = Field(description="where each number comes from, keyed by dotted field name")
    notes: str = ""

    @model_validator(mode="after")
    def _check_sources(self) -> "EngineSpec":
        if self.is_ideal:
            return self
        for key in SOURCED_FIELDS:
            if not self.sources.get(key):
                raise field_error(EngineSpec, "sources", f"sources must say where {key} comes from", self.sources)
        return self

    @property
    def is_ideal(self) -> bool:
        """Prices nothing beyond the bare kernels (and the hardware's own per-kernel overhead)."""
        return self.launch.use_hardware_overhead and not any((
            self.host.constant_s, self.host.per_sequence_s, self.host.per_token_s, self.speculative.draft_extend,
            self.speculative.draft_softmax_topk, self.speculative.verify_batch_expansion,
            self.speculative.ngram_ops_per_sequence, self.speculative.extra_kernels, self.speculative.per_iteration_s,
            self.speculative.per_sequence_s,
            self.speculative.output_per_sequence_s))

    @property
    def short_name(self) -> str:
        return self.aliases[0] if self.aliases else self.name


__all__ = ["EngineSpec", "Launch", "Host", "Speculative", "Scheduling", "SOURCED_FIELDS"]
