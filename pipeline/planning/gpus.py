"""What each GPU type can do at most: memory, HBM bandwidth, dense tensor-core peaks per compute
format, and the interconnect one tensor-parallel all-reduce crosses.

Peaks are dense (no 2:4 sparsity), from the vendors' datasheets named in `source`; a format a
GPU has no tensor cores for is None (the engine then computes in 16 bits: FP8 weights on an
A100 run through weight-only kernels). Link: one direction's bandwidth between two GPUs
(NVLink / Infinity Fabric aggregate ÷ 2; PCIe x16 per direction). NIC: one direction's network
bandwidth per GPU between nodes (NICS below: the vendors' reference 8-GPU servers), what a
pipeline stage's hidden states cross to the next node.
"""

import re
from dataclasses import dataclass, replace

from pipeline.core.errors import UserError
from pipeline.planning import kv_cache

MIB = 2**20
GIB = 2**30
TB = 10**12
GPUS_PER_NODE = 8  # vLLM's guidance: tensor parallel within a node, pipeline stages across nodes
MAX_NODES = 8  # the most nodes a plan proposes


@dataclass(frozen=True)
class Hardware:
    """A GPU type, or this host's CPU with its measured rates (pipeline/perf/host.py)."""

    name: str
    memory_bytes: int  # as nvidia-smi / rocm-smi reports it
    bytes_s: float  # memory bandwidth
    peak_flops: dict  # compute format ("bf16", "fp8", "int8", "fp4") → dense FLOP/s
    link_bytes_s: float
    source: str
    nic_bytes_s: float = 0.0  # per GPU, between nodes (0: not known / one machine)

    def flops(self, compute: str) -> tuple[float, str]:
        """Peak for `compute`, falling back to 16-bit where the GPU has no such tensor cores;
        with the format it really computes in."""
        if self.peak_flops.get(compute):
            return self.peak_flops[compute], compute
        return self.peak_flops["bf16"], "bf16"


def _spec(name, mib, tb_s, bf16, fp8, int8, fp4, link_gb_s, source) -> Hardware:
    peaks = {"bf16": bf16 * TB, "fp8": fp8 and fp8 * TB, "int8": int8 and int8 * TB}
    peaks["fp4"] = fp4 and fp4 * TB
    return Hardware(name, mib * MIB, tb_s * TB, peaks, link_gb_s * 10**9, source)


SPECS: dict[str, Hardware] = {
    s.name: s
    for s in (
        _spec(
            "A100-40GB",
            40_960,
            1.555,
            312,
            None,
            624,
            None,
            300,
            "NVIDIA A100 Tensor Core GPU datasheet (SXM4; NVLink 3: 600 GB/s)",
        ),
        _spec(
            "A100-80GB",
            81_920,
            2.039,
            312,
            None,
            624,
            None,
            300,
            "NVIDIA A100 Tensor Core GPU datasheet (SXM4 80GB; NVLink 3: 600 GB/s)",
        ),
        _spec(
            "H100-80GB",
            81_559,
            3.35,
            989.4,
            1978.9,
            1978.9,
            None,
            450,
            "NVIDIA H100 Tensor Core GPU datasheet (SXM5; NVLink 4: 900 GB/s)",
        ),
        _spec(
            "H100-PCIe-80GB",
            81_559,
            2.0,
            756.5,
            1513,
            1513,
            None,
            64,
            "NVIDIA H100 Tensor Core GPU datasheet (PCIe; PCIe Gen5 x16)",
        ),
        _spec(
            "H200-141GB",
            143_771,
            4.8,
            989.4,
            1978.9,
            1978.9,
            None,
            450,
            "NVIDIA H200 Tensor Core GPU datasheet (SXM; NVLink 4: 900 GB/s)",
        ),
        _spec(
            "L40S-48GB",
            46_068,
            0.864,
            362,
            733,
            733,
            None,
            32,
            "NVIDIA L40S datasheet (PCIe Gen4 x16, no NVLink)",
        ),
        _spec(
            "B200-180GB",
            183_359,
            8.0,
            2250,
            4500,
            4500,
            9000,
            900,
            "NVIDIA DGX B200 datasheet (NVLink 5: 1.8 TB/s); nvidia-smi shows 183,359 MiB",
        ),
        _spec(
            "MI300X-192GB",
            196_608,
            5.3,
            1307.4,
            2614.9,
            2614.9,
            None,
            448,
            "AMD Instinct MI300X datasheet (Infinity Fabric: 896 GB/s peer aggregate)",
        ),
    )  # fmt: skip
}


# Per GPU, one direction, GB/s: the compute NICs of each vendor's reference server ÷ its GPUs
NICS = {
    "A100-40GB": (25, "DGX A100: 8 × 200 Gb/s ConnectX-6 for 8 GPUs"),
    "A100-80GB": (25, "DGX A100: 8 × 200 Gb/s ConnectX-6 for 8 GPUs"),
    "H100-80GB": (50, "DGX H100: 8 × 400 Gb/s ConnectX-7 for 8 GPUs"),
    "H100-PCIe-80GB": (12.5, "assumed: one 200 Gb/s NIC per two PCIe GPUs (no reference server)"),
    "H200-141GB": (50, "DGX H200: 8 × 400 Gb/s ConnectX-7 for 8 GPUs"),
    "L40S-48GB": (12.5, "assumed: one 200 Gb/s NIC per two PCIe GPUs (no reference server)"),
    "B200-180GB": (50, "DGX B200: 8 × 400 Gb/s ConnectX-7 for 8 GPUs"),
    "MI300X-192GB": (50, "AMD Instinct MI300X platform: 8 × 400 Gb/s NICs for 8 GPUs"),
}
SPECS = {
    name: replace(spec, nic_bytes_s=NICS[name][0] * 10**9, source=f"{spec.source}; {NICS[name][1]}")
    for name, spec in SPECS.items()
}


def find(name: str) -> Hardware | None:
    """A known GPU type by name, case-insensitively (None: a bare size or an unknown name)."""
    return next((s for key, s in SPECS.items() if key.lower() == name.strip().lower()), None)


def match(line: str) -> Hardware | None:
    """The spec of a GPU as environment.gpus() lists it ("NVIDIA H100 80GB HBM3, 81559 MiB"):
    the same family and form factor, memory within 5%."""
    text = line.lower()
    found = re.search(r"([\d.]+)\s*mib", text)
    memory = float(found[1]) * MIB if found else None
    for spec in SPECS.values():
        family = spec.name.split("-")[0].lower()
        if family not in text or ("pcie" in text) != ("pcie" in spec.name.lower()):
            continue
        if memory is None or abs(memory - spec.memory_bytes) <= 0.05 * spec.memory_bytes:
            return spec
    return None


def sized(memory_bytes: int, name: str = "") -> Hardware:
    """A GPU known by its memory alone (no bandwidth or peaks: it is priced by nothing)."""
    label = name or f"{memory_bytes / GIB:g}GiB"
    return Hardware(label, memory_bytes, 0.0, {"bf16": 0.0}, 0.0, "its memory alone")


@dataclass(frozen=True)
class Inventory:
    """The GPUs a deployment may take: one type (memory, link between GPUs, NIC between nodes),
    so many to a node, so many nodes."""

    hardware: Hardware
    per_node: int = GPUS_PER_NODE
    nodes: int = MAX_NODES

    @property
    def name(self) -> str:
        return self.hardware.name

    @property
    def memory_bytes(self) -> int:
        return self.hardware.memory_bytes

    @property
    def count(self) -> int:
        return self.per_node * self.nodes

    @property
    def scheduled_tokens(self) -> int:
        """vLLM's default max_num_batched_tokens on this GPU."""
        return kv_cache.scheduled_tokens(self.name, self.memory_bytes)


def named(text: str, per_node: int = GPUS_PER_NODE, nodes: int = MAX_NODES) -> Inventory:
    """A known GPU type (A100-80GB, H100-80GB, …) or a size: '24GiB', '48GB', '80'."""
    if known := find(text):
        return Inventory(known, per_node, nodes)
    value = text.strip().lower()
    for suffix, unit in (("gib", GIB), ("gb", 10**9), ("", GIB)):
        if value.endswith(suffix):
            try:
                size = float(value.removesuffix(suffix) if suffix else value)
            except ValueError:
                continue
            if 0 < size < 2**20:  # up to a PiB-sized GPU: not inf, not nan
                return Inventory(sized(int(size * unit), text.strip()), per_node, nodes)
    raise UserError(f"unknown GPU '{text}'; known: {', '.join(SPECS)}, or a size like 24GiB")


def this_node(lines: list[str]) -> Inventory | None:
    """The GPUs this process sees ("NVIDIA H100 80GB HBM3, 81559 MiB" each), as one node of the
    smallest of them (None: no GPU)."""
    if not lines:
        return None
    sizes = [int(float(m[1]) * MIB) for x in lines if (m := re.search(r"([\d.]+)\s*MiB", x))]
    if not sizes:  # a listing without memory: assume the reference GPU
        return Inventory(SPECS["H100-80GB"], len(lines), 1)
    smallest = min(range(len(sizes)), key=sizes.__getitem__)
    spec = match(lines[smallest])
    hardware = replace(spec, memory_bytes=sizes[smallest]) if spec else sized(sizes[smallest])
    return Inventory(hardware, len(lines), 1)
