"""The engine log and metrics formats `acceptance.engines` reads, in a module of their own so that building the
command-line parser (`rooflinesim acceptance from-logs --format`) does not import the readers."""

FORMATS = ("auto", "vllm-v0", "vllm-v1", "prometheus", "sglang", "trtllm")

__all__ = ["FORMATS"]
