"""Where the cells run: one after another here (`local`), or as Ray tasks (`ray`) on the cluster
at RAY_ADDRESS (a local Ray when unset). On Ray each cell holds the GPUs its chain uses at once
on one node (placement.py: one STRICT_PACK placement group per cell), sees exactly the GPUs Ray
assigned it (CUDA_VISIBLE_DEVICES), runs with this checkout's envs on that node (envs.py), is
stopped past the matrix's cell_timeout_s, and is retried once on another node when its node
dies; one whose node is lost with no other to hold it is recorded as failed, with why.
Either way each result comes back to the caller, which writes it to the store.

    with executors.connect("ray", cells, "H100-80GB", timeout_s, runs) as runner:  # refusals here
        runner.run(todo, log_dir, done, claim)

Each runner holds the Runs it was handed: the local one runs its cells with it; Ray's hands its
RUNS_DIR to every task (runtime_env_vars), where the cell makes its own (cell.execute_on_node).
"""

import contextlib
import logging
import os
import sys
from collections.abc import Callable, Iterator

from pipeline.core import stopping
from pipeline.core.paths import REPO
from pipeline.core.progress import bar
from pipeline.core.runs import Runs
from pipeline.nightly import envs, placement
from pipeline.nightly.cell import STOP_GRACE_S, execute, execute_on_node
from pipeline.nightly.matrix import Cell

Done = Callable[[dict], object]
Claim = Callable[[Cell], bool]
NAMES = ("local", "ray")
POLL_S = 30  # how often the driver looks at cells still waiting for a node


class Local:
    name = "local"

    def __init__(self, timeout_s: float | None, runs: Runs):
        self.timeout_s, self.runs = timeout_s, runs

    def run(self, cells: list[Cell], log_dir: str, done: Done, claim: Claim = bool) -> None:
        # closed however the night ends: a driver that stops says why on a line of its own
        with bar(total=len(cells), desc="nightly cells", unit="cell") as progress:
            for cell in cells:
                progress.set_postfix_str(f"{cell.model} × {cell.name}", refresh=True)
                if claim(cell):  # claimed just before it runs: drivers share a matrix cell by cell
                    done(execute(cell, self.runs, log_dir, self.timeout_s))
                progress.update()


class Ray:
    name = "ray"

    def __init__(self, cells: list[Cell], gpu: str, timeout_s: float | None, runs: Runs):
        import ray

        self.ray, self.timeout_s, self.runs = ray, timeout_s, runs
        self.env_stamps = envs.fingerprint()
        self.nodes = placement.alive(ray.nodes())
        self.gpu = gpu
        # every cell's reservation before the night starts: one that no node holds is refused
        self.reservations = {_key(c): placement.reserve(c, self.nodes, gpu) for c in cells}

    def run(self, cells: list[Cell], log_dir: str, done: Done, claim: Claim = bool) -> None:
        from ray.util import placement_group, remove_placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        ray = self.ray
        remote = ray.remote(execute_on_node)
        pending = {}

        def submit(cell: Cell) -> None:
            gpus = self.reservations[_key(cell)].gpus
            group = placement_group([{"CPU": 1, "GPU": gpus} if gpus else {"CPU": 1}],
                                    strategy="STRICT_PACK")  # fmt: skip
            ref = remote.options(
                num_cpus=1,
                num_gpus=gpus,
                max_retries=1,  # a lost node: once more, wherever the group is placed again
                scheduling_strategy=PlacementGroupSchedulingStrategy(group, 0),
            ).remote(cell, log_dir, self.timeout_s, self.env_stamps)
            pending[ref] = (cell, group)

        # cells that share a run folder run one after another (its lock, its manifest's commit)
        queues = in_turn(list(filter(claim, cells)))
        for queue in queues.values():
            submit(queue.pop(0))
        progress = bar(total=sum(map(len, queues.values())) + len(pending),
                       desc="nightly cells (ray)", unit="cell")  # fmt: skip
        with progress, _cancelled_when_stopped(ray, pending):  # closed however it ends
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=POLL_S)
                lost = {} if ready else self._unplaceable(pending)
                for ref in ready or lost:
                    cell, group = pending.pop(ref)
                    if ref in lost:
                        done(_failed(cell, lost[ref]))
                    else:
                        try:
                            done(ray.get(ref))
                        except ray.exceptions.RayError as e:  # lost twice: failed, night goes on
                            done(_failed(cell, f"ray: {_first_line(e)}"))
                    with contextlib.suppress(Exception):
                        remove_placement_group(group)
                    if queues[cell.folder]:
                        submit(queues[cell.folder].pop(0))
                    progress.update()

    def _unplaceable(self, pending: dict) -> dict:
        """Cells still waiting whose reservation no node alive now holds (their node was lost
        and none other fits): cancelled, each with why."""
        nodes = placement.alive(self.ray.nodes())
        widest = max((n.gpus for n in nodes), default=0)
        lost = {}
        for ref, (cell, _) in pending.items():
            gpus = self.reservations[_key(cell)].gpus
            if gpus > widest:
                self.ray.cancel(ref, force=True)
                lost[ref] = (
                    f"ray: no node alive holds its {gpus} GPUs now ({placement.shapes(nodes)})"
                )
        return lost


@contextlib.contextmanager
def _cancelled_when_stopped(ray, pending: dict) -> Iterator[None]:
    """The driver stopped (Ctrl-C, SIGTERM): each running cell gets Ray's cancel, which raises
    KeyboardInterrupt in its task, so it stops as a command does (cell._run); their ends are
    awaited before Ray shuts down and takes the workers with it."""
    try:
        yield
    except KeyboardInterrupt:
        for ref in pending:
            with contextlib.suppress(Exception):
                ray.cancel(ref)
        with contextlib.suppress(Exception):
            ray.wait(list(pending), num_returns=len(pending), timeout=STOP_GRACE_S + 10)
        raise


@contextlib.contextmanager
def connect(
    name: str, cells: list[Cell], gpu: str, timeout_s: float | None, runs: Runs
) -> Iterator:
    """The executor `name` (one of NAMES), connected; Ray's reservations checked."""
    if name == "local":
        yield Local(timeout_s, runs)
        return
    if os.environ.get("RAY_ADDRESS"):
        _token_auth()  # before Ray reads its config
    import ray

    _connect(ray, runs)
    try:
        yield Ray(cells, gpu, timeout_s, runs)
    finally:
        ray.shutdown()


def _connect(ray, runs: Runs) -> None:
    """This process as a Ray driver: to the cluster at RAY_ADDRESS (its token from
    RAY_AUTH_TOKEN or Ray's token file, as Ray reads them), else a local Ray. Workers import
    the pipeline from this checkout's path (envs.py) and get the variables cells read, except
    credentials (runtime_env_vars)."""
    address = os.environ.get("RAY_ADDRESS")
    if not address:
        os.environ.pop("RAY_ADDRESS", None)  # empty means unset for us; Ray might disagree
    env = runtime_env_vars(os.environ, runs)
    quiet = {"log_to_driver": False, "logging_level": logging.WARNING}  # our lines, not Ray's
    if address:
        ray.init(address=address, runtime_env={"env_vars": env}, **quiet)
    else:
        ray.init(
            num_cpus=max(1, os.cpu_count() or 1),
            include_dashboard=False,
            object_store_memory=200 * 2**20,  # results are small dicts
            runtime_env={"env_vars": env},
            **quiet,
        )
    stopping.reclaim()  # ray.init's own SIGTERM handler exits at once: the cells never told


# What cells read, sent with every task. Never credentials: Ray 2.60's runtime-env agent logs
# a task's env_vars at INFO on every node (`Creating runtime env: …`). HF_TOKEN and AWS keys
# come from each node's own environment or files (`ray start` run with them, ~/.aws,
# ~/.cache/huggingface/token); a node without them refuses its cells (envs.refusal).
SHARED = ("PIPELINE_CACHE", "HF_HOME", "HF_HUB_OFFLINE", "AWS_ENDPOINT_URL",
          "AWS_ENDPOINT_URL_S3", "AWS_DEFAULT_REGION", "AWS_REGION", "AWS_PROFILE")  # fmt: skip


def runtime_env_vars(environ, runs: Runs) -> dict[str, str]:
    """The variables a cell's Ray task gets from the driver: SHARED, never a secret, and
    RUNS_DIR as the driver was handed it (`runs`)."""
    env = {k: environ[k] for k in SHARED if k in environ}
    env["RUNS_DIR"] = runs.setting
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), environ.get("PYTHONPATH")]))
    return env


def in_turn(cells: list[Cell]) -> dict[tuple[str, str], list[Cell]]:
    """Cells by run folder, in matrix order: each folder's run one at a time."""
    queues: dict[tuple[str, str], list[Cell]] = {}
    for cell in cells:
        queues.setdefault(cell.folder, []).append(cell)
    return queues


def _key(cell: Cell) -> tuple[str, str]:
    return cell.model, cell.name  # a cell's serve settings hold lists: not hashable


def _token_auth() -> None:
    """Ray 2.60 turns token authentication on at `ray start --head`, but a driver given an
    address never turns it on by itself (worker.py: "an explicit address … never does"): with
    a token at hand (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token) and no
    RAY_AUTH_MODE, this driver uses it."""
    if "RAY_AUTH_MODE" in os.environ:
        return
    path = os.environ.get("RAY_AUTH_TOKEN_PATH") or os.path.expanduser("~/.ray/auth_token")
    if os.environ.get("RAY_AUTH_TOKEN") or os.path.isfile(path):
        os.environ["RAY_AUTH_MODE"] = "token"
        if "ray._raylet" in sys.modules:  # imported already: its cached config reread
            sys.modules["ray._raylet"].Config.initialize("")


def _first_line(e: Exception) -> str:
    return (str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__)[:400]


def _failed(cell: Cell, why: str) -> dict:
    return {
        "model": cell.model,
        "cell": cell.name,
        "recipe": cell.recipe,
        "overrides_sha": cell.overrides_sha,
        "status": "failed",
        "error": why,
        "stages": {},
        "metrics": [],
        "where": None,
    }
