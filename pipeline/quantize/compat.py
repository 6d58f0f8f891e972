"""Work-arounds for upstream issues, each in one place with the reason and the version seen."""


def patch_llmcompressor_for_cpu() -> None:
    """llm-compressor 0.14's sequential pipeline pins cached activations for faster H2D copies
    (AWQ calls `IntermediatesCache.pin_memory`), which raises "Cannot access accelerator device
    when none is available" on a CPU-only host. Pinning only helps device copies, so without an
    accelerator it is skipped. No effect on hosts with a GPU."""
    import torch

    if torch.accelerator.is_available():
        return
    from llmcompressor.pipelines.cache import IntermediatesCache

    # a deliberate patch of the library's method, which mypy refuses to assign
    IntermediatesCache.pin_memory = (  # type: ignore[method-assign]
        lambda self, batch_index, input_names=None: None
    )
