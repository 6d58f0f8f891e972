"""What format a checkpoint quantized elsewhere is in, from the files it ships.

    quantization_config.quant_method   in config.json (transformers' convention), or the older
                                        side files: quantize_config.json (AutoGPTQ),
                                        quant_config.json (AutoAWQ), hf_quant_config.json (ModelOpt)

`scheme` is the weight format in compressed-tensors' terms (what the planner, the size check and
the serving probes read). `hf` says how the hf eval backend runs it: "native" (transformers
loads it and runs it in float32), a converter to compressed-tensors ("gptq", "awq": transformers
5 loads those formats only through GPTQModel / optimum, and AutoRound's own kernels compute in
float16 on CPU), or None with `hf_refusal` (vLLM only).
"""

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.config.engine_name import ENGINE
from pipeline.core.errors import UserError

METHODS = ("awq", "gptq", "auto-round", "compressed-tensors", "fp8", "modelopt")
SIDE_FILES = {  # older tools wrote the config beside config.json
    "quantize_config.json": "gptq",
    "quant_config.json": "awq",
    "hf_quant_config.json": "modelopt",
}


@dataclass(frozen=True)
class ExternalFormat:
    method: str  # quant_method, normalized
    packing: str  # how the tensors are laid out (gptq v1/v2, awq gemm, pack-quantized, …)
    producer: str  # the tool that wrote it, when the config says
    weights: dict  # compressed-tensors weight arguments (num_bits, type, group_size, …)
    activations: dict | None = None  # input activations, for W8A8 / FP8 formats
    ignore: list[str] = field(default_factory=lambda: ["lm_head"])
    hf: str | None = "native"
    hf_refusal: str | None = None
    config: dict = field(default_factory=dict)  # the quantization config as found
    kv_cache_scheme: dict | None = None

    def describe(self) -> dict:
        """What the manifest and the summary record."""
        return {
            "quant_method": self.method,
            "packing": self.packing,
            "producer": self.producer,
            "weights": self.weights,
            "activations": self.activations,
            "hf_path": self.hf_path,
        }

    @property
    def hf_path(self) -> str:
        if self.hf == "native":
            return "transformers loads it as it is"
        if self.hf:
            return f"converted to compressed-tensors ({self.hf} converter); served as shipped"
        return f"{ENGINE} only: {self.hf_refusal}"

    def modifier(self) -> dict:
        """The format as an llm-compressor modifier's arguments: how the pipeline's recipe
        machinery (sizes, plans, serving probes) reads an artifact it did not make."""
        group = {"targets": ["Linear"], "weights": self.weights}
        if self.activations:
            group["input_activations"] = self.activations
        args = {"ignore": self.ignore, "config_groups": {"group_0": group}}
        if self.kv_cache_scheme:
            args["kv_cache_scheme"] = self.kv_cache_scheme
        return args


def detect(folder: Path, shown: str) -> ExternalFormat:
    config, source = _quantization_config(folder, shown)
    method = str(config.get("quant_method", "")).lower().replace("intel/", "")
    method = {"autoround": "auto-round", "auto_round": "auto-round"}.get(method, method)
    if method not in METHODS:
        raise UserError(
            f"{shown}: quant_method '{method}' in {source} is not one this pipeline reads; "
            f"known: {', '.join(METHODS)}"
        )
    return _READERS[method](config, shown)


def _quantization_config(folder: Path, shown: str) -> tuple[dict, str]:
    config = _json(folder / "config.json", shown)
    if isinstance(config.get("quantization_config"), dict):
        return config["quantization_config"], "config.json"
    for name, method in SIDE_FILES.items():
        if (folder / name).is_file():
            found = _json(folder / name, shown)
            found = found.get("quantization", found)  # ModelOpt nests it
            return {"quant_method": method, **found}, name
    raise UserError(
        f"{shown}: not a quantized checkpoint (config.json has no quantization_config); "
        "to quantize it, use MODEL= with a RECIPE="
    )


def _json(path: Path, shown: str) -> dict:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"{shown}: no {path.name}: not a Hugging Face checkpoint folder") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{shown}: {path.name} is not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise UserError(f"{shown}: {path.name} must hold a JSON object")
    return data


def _int_weights(bits, group_size, sym: bool) -> dict:
    group = int(group_size) if group_size not in (None, -1, 0) else None
    return {
        "num_bits": int(bits),
        "type": "int",
        "symmetric": bool(sym),
        "strategy": "group" if group else "channel",
        "group_size": group,
    }


def _gptq(
    c: dict, shown: str, packing: str | None = None, producer: str | None = None
) -> ExternalFormat:
    # GPTQModel writes checkpoint_format (or format) "gptq" (AutoGPTQ's v1: zero points − 1)
    # or "gptq_v2"; AutoGPTQ and AutoRound write none: v1
    fmt = str(c.get("checkpoint_format") or c.get("format") or "gptq").lower()
    if fmt not in ("gptq", "gptq_v2"):
        raise UserError(
            f"{shown}: GPTQ checkpoint_format '{fmt}' (a kernel-specific layout such as Marlin's "
            "or BitBLAS's) is not read here; export it in the gptq format"
        )
    bits = int(c.get("bits", 4))
    hf: str | None = "gptq"
    refusal: str | None = None
    if bits not in (2, 4, 8):
        hf, refusal = None, f"{bits}-bit GPTQ packs values across int32 words: no converter"
    ignore = ["lm_head"] if not c.get("lm_head") else []
    ignore += [f"re:.*{m}.*" for m in c.get("modules_to_not_convert") or []]
    return ExternalFormat(
        method="gptq",
        packing=packing or ("gptq_v2" if fmt == "gptq_v2" else "gptq v1"),
        producer=producer or _producer(c, "AutoGPTQ / GPTQModel"),
        weights=_int_weights(bits, c.get("group_size", 128), c.get("sym", True))
        | ({"actorder": "group"} if c.get("desc_act") else {}),
        ignore=ignore,
        hf=hf,
        hf_refusal=refusal,
        config=c,
    )


def _awq(c: dict, shown: str, producer: str | None = None) -> ExternalFormat:
    version = str(c.get("version", "gemm")).lower()
    if version != "gemm":
        raise UserError(
            f"{shown}: AWQ '{version}' packing is read by neither {ENGINE} nor compressed-tensors' "
            "converter (both take GEMM); export it with version GEMM"
        )
    bits = int(c.get("bits", c.get("w_bit", 4)))
    zero_point = bool(c.get("zero_point", True))
    refusal = None if bits == 4 else f"{bits}-bit AWQ: the AutoAWQ converter takes 4-bit only"
    ignore = ["lm_head"] + [f"re:.*{m}.*" for m in c.get("modules_to_not_convert") or []]
    return ExternalFormat(
        method="awq",
        packing="awq gemm",
        producer=producer or _producer(c, "AutoAWQ"),
        weights=_int_weights(bits, c.get("group_size", c.get("q_group_size", 128)), not zero_point),
        ignore=ignore,
        hf="awq" if refusal is None else None,
        hf_refusal=refusal,
        config=c,
    )


def _auto_round(c: dict, shown: str) -> ExternalFormat:
    packing = str(c.get("packing_format") or "auto_round:auto_gptq")
    producer = _producer(c, "AutoRound")
    if "awq" in packing:
        return _awq({**c, "zero_point": not c.get("sym", True)}, shown, producer)
    if "gptq" not in packing:
        raise UserError(
            f"{shown}: AutoRound packing '{packing}' is not read here (auto_round:auto_gptq and "
            "auto_round:auto_awq are); export with format auto_gptq or llm_compressor"
        )
    return _gptq({**c, "checkpoint_format": "gptq"}, shown, packing, producer)


def _compressed_tensors(c: dict, shown: str) -> ExternalFormat:
    groups = [g for g in (c.get("config_groups") or {}).values() if isinstance(g, dict)]
    if not groups:
        raise UserError(f"{shown}: compressed-tensors config without config_groups")
    first = groups[0]
    return ExternalFormat(
        method="compressed-tensors",
        packing=str(c.get("format") or first.get("format") or "compressed-tensors"),
        producer=_producer(c, "llm-compressor / compressed-tensors"),
        weights=first.get("weights") or {},
        activations=first.get("input_activations"),
        ignore=list(c.get("ignore") or []),
        config=c,
        kv_cache_scheme=c.get("kv_cache_scheme"),
    )


def _fp8(c: dict, shown: str) -> ExternalFormat:
    block = c.get("weight_block_size")
    weights = {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "tensor"}
    if block:
        weights = weights | {"strategy": "block", "block_structure": list(block)}
    dynamic = str(c.get("activation_scheme", "dynamic")) == "dynamic"
    acts = {"num_bits": 8, "type": "float", "symmetric": True, "dynamic": dynamic}
    acts |= {"strategy": "token" if dynamic else "tensor"}
    return ExternalFormat(
        method="fp8",
        packing="fp8 (" + ("blocks" if block else "per tensor") + ")",
        producer=_producer(c, f"{ENGINE} / transformers FP8"),
        weights=weights,
        activations=acts,
        ignore=list(c.get("ignored_layers") or c.get("modules_to_not_convert") or ["lm_head"]),
        hf=None,
        hf_refusal="transformers' FP8 loader needs a GPU",
        config=c,
    )


def _modelopt(c: dict, shown: str) -> ExternalFormat:
    algo = str(c.get("quant_algo", "")).upper()
    if algo.startswith("NVFP4"):
        weights = {"num_bits": 4, "type": "float", "symmetric": True, "group_size": 16}
        weights |= {"strategy": "tensor_group"}
        acts = None if "A16" in algo else weights
    elif algo.startswith("FP8"):
        weights = {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "tensor"}
        acts = {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "tensor"}
    else:
        raise UserError(f"{shown}: ModelOpt quant_algo '{algo}' is not read here (FP8, NVFP4)")
    return ExternalFormat(
        method="modelopt",
        packing=f"modelopt {algo.lower()}",
        producer=_producer(c, "NVIDIA ModelOpt"),
        weights=weights,
        activations=acts,
        ignore=list(c.get("exclude_modules") or c.get("ignore") or ["lm_head"]),
        hf=None,
        hf_refusal="transformers has no ModelOpt loader",
        config=c,
    )


def _producer(c: dict, default: str) -> str:
    if c.get("autoround_version"):
        return f"AutoRound {c['autoround_version']}"
    quantizer = (c.get("meta") or {}).get("quantizer")
    if quantizer:
        return ", ".join(quantizer) if isinstance(quantizer, list) else str(quantizer)
    return default


_READERS: dict[str, Callable[[dict, str], ExternalFormat]] = {
    "gptq": _gptq,
    "awq": _awq,
    "auto-round": _auto_round,
    "compressed-tensors": _compressed_tensors,
    "fp8": _fp8,
    "modelopt": _modelopt,
}


def model_config(folder: Path) -> dict:
    """config.json itself (detect() has read it already: it exists and is an object)."""
    return json.loads((folder / "config.json").read_text())
