"""Where a nightly cell runs on a Ray cluster: the GPUs it holds at once, on one node.

A cell's chain uses, at its widest, its paired serve: the original's and the artifact's engines
up together, each at the TP the deployment planner gives it (planning/deployment.py, on the
matrix's GPU type; a TP the cell sets is both sides'). The cell holds both sides' GPUs where a
node has that many (side by side); else the larger side's (the serve then shares those GPUs or
serves in turn: planning/placement.py decides inside the cell); without serve, the larger of the
eval's engines, which run one after the other. One placement group per cell, one bundle,
STRICT_PACK: every GPU of a cell on one node. A cell no node can hold is refused before the night
starts, naming the node shapes seen. Pure: tested against recorded node lists.
"""

from dataclasses import dataclass

from pipeline.config import recipe as recipes
from pipeline.core.errors import UserError
from pipeline.models import aliases
from pipeline.nightly.matrix import Cell
from pipeline.planning import deployment, geometry
from pipeline.planning.gpus import named
from pipeline.planning.weights import artifact_bytes


@dataclass(frozen=True)
class Node:
    node_id: str
    address: str
    gpus: int
    cpus: int

    @classmethod
    def of(cls, entry: dict) -> "Node":
        """From one of `ray.nodes()`'s entries."""
        resources = entry.get("Resources") or {}
        return cls(
            entry["NodeID"],
            entry.get("NodeManagerAddress", "?"),
            int(resources.get("GPU", 0)),
            int(resources.get("CPU", 0)),
        )

    def describe(self) -> str:
        return f"{self.address}/{self.node_id[:8]} {self.gpus} GPUs"


@dataclass(frozen=True)
class Reservation:
    gpus: int  # held on one node for the whole cell
    why: str


def alive(entries: list[dict]) -> list[Node]:
    return [Node.of(e) for e in entries if e.get("Alive")]


def shapes(nodes: list[Node]) -> str:
    return "; ".join(n.describe() for n in nodes) or "no node alive"


def reserve(cell: Cell, nodes: list[Node], gpu: str) -> Reservation:
    """What the cell holds on `nodes` (UserError: no node holds even its least)."""
    widest = max((n.gpus for n in nodes), default=0)
    name = f"cell {cell.model} × {cell.name}"
    if cell.gpus is not None:
        if cell.gpus > widest:
            raise UserError(
                f"{name} holds {cell.gpus} GPUs on one node; no node has them ({shapes(nodes)})"
            )
        return Reservation(cell.gpus, "as the matrix sets it")
    if widest == 0:
        return Reservation(0, "a cluster without GPUs: CPU engines")
    original, artifact = sides(cell, gpu, widest)
    paired = "serve" in cell.stages
    together = original + artifact if paired else max(original, artifact)
    if together <= widest:
        how = "both serve sides side by side" if paired else "the larger eval engine"
        return Reservation(together, f"{how}: TP {original} + {artifact}" if paired else how)
    least = max(original, artifact)
    if least <= widest:
        return Reservation(least, f"the larger side (TP {least}): the sides share or take turns")
    raise UserError(
        f"{name}: its engines need TP {original} (original) and {artifact} ({cell.recipe}) on "
        f"{gpu}; no node has {least} GPUs ({shapes(nodes)})"
    )


def sides(cell: Cell, gpu: str, per_node: int) -> tuple[int, int]:
    """(original TP, artifact TP) for the cell's serve load, as the deployment planner sizes
    them on nodes of `per_node` × `gpu` (the cell's own TP for both, where it sets one)."""
    if cell.tensor_parallel_size:
        return cell.tensor_parallel_size, cell.tensor_parallel_size

    g = geometry.of_model(aliases.resolve(cell.model))
    original = g.original_bytes
    rf = recipes.load(cell.recipe_arg) if cell.recipe_arg and cell.artifact is None else None
    artifact = artifact_bytes(rf, g) if rf and not rf.online else original
    node = named(gpu, per_node=per_node, nodes=1)
    found = []
    for weights, kv in ((original, "auto"), (artifact, cell.kv_cache_dtype)):
        load = deployment.Load(weights, kv, cell.users, cell.context)
        planned = deployment.fewest(g, load, node)
        found.append(planned.tensor_parallel_size if planned else per_node + 1)
    return found[0], found[1]
