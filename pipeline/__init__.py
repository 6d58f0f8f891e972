"""Recipe-driven quantization pipeline: quantize, evaluate, serve and publish open-weight LLMs."""

__version__ = "0.1.0"
