"""`make nightly`: every cell of the matrix through its stages, results into the store, each cell
compared with its previous successful run and the pinned baseline; a summary table; exit 1 when
a cell failed, 3 when a gate failed or something regressed.

Stages whose inputs (recipe, data, library versions, …) did not change are reused from the run
directories, so an unchanged night costs little. An interrupted run (its `ended` still empty) is
resumed by the next `make nightly` of the same matrix: the cells already recorded are kept —
unless the commit, a library version, the executor or (local) the GPUs changed since it started:
then the night starts a run of its own and says so (store.changed). A second driver on a matrix
whose run is going joins it and takes only the cells nobody has claimed (store/); the last
driver to record a cell ends the run. A driver whose lease another driver took, or that cannot
reach the database within the store's tries, stops its cells and says so in one line (exit 1).
"""

import contextlib
import os
import socket
import threading
from collections.abc import Iterator
from secrets import token_hex

from pipeline.config.engine_name import PACKAGE
from pipeline.core import environment, secrets
from pipeline.core.errors import UserError
from pipeline.core.runs import Runs
from pipeline.engines import serving_env
from pipeline.nightly import cell as cells_here
from pipeline.nightly import executors, matrix, regress
from pipeline.nightly.store import HEARTBEAT_S, Held, Store, urls

LIBRARIES = ("llmcompressor", "compressed-tensors", "transformers", "torch", "lm_eval")


def open_store(db: str | None, m: matrix.Matrix | None, existing: bool = False) -> Store:
    """The store at --db, else NIGHTLY_DB, else the matrix's `store` (the command line over the
    environment over the file, as everywhere); errors name which. `existing`: a reader's (the
    report's), which must not leave an empty SQLite file where there was none."""
    if db:
        url, source = db, "--db"
    elif os.environ.get("NIGHTLY_DB"):
        url, source = os.environ["NIGHTLY_DB"], "NIGHTLY_DB"
    else:
        url = m.store if m else matrix.Matrix.model_fields["store"].default
        source = "the matrix's store; NIGHTLY_DB or --db to change it"
    if existing:
        parsed = urls.parse(url, f"{source}: {secrets.url(url)}")  # as Store names it
        if parsed.get_backend_name() == "sqlite" and not os.path.exists(parsed.database or ""):
            raise UserError(
                f"no nightly store at {parsed.database} ({source}): run `make nightly` first"
            )
    return Store(url, source=source)


def pin_baseline(matrix_path: str | None, db: str | None, run_id: str) -> tuple[str, str]:
    """Pin a run (or "latest") as the baseline later nights compare with; the run id pinned and
    the store's URL, its password masked."""
    m, _ = matrix.load(matrix_path)
    with open_store(db, m) as store:
        if run_id == "latest":
            runs = store.run_ids()
            run_id = runs[-1]["id"] if runs else "latest"
        store.pin(run_id)
        return run_id, secrets.url(store.url)


def nightly(
    matrix_path: str | None, executor: str, db: str | None, new: bool, runs: Runs
) -> tuple[str, str | None]:
    """The night, its cells' run folders and logs under `runs`."""
    m, sha = matrix.load(matrix_path)
    cells = matrix.cells(m, runs)  # every recipe and override checked before anything runs
    if executor not in executors.NAMES:
        raise UserError(f"unknown executor '{executor}' (valid: {', '.join(executors.NAMES)})")
    with open_store(db, m) as store:
        store.require_writable()  # a store this host may only read: one line, before the cluster
        # the cluster and each cell's place on it checked before the night is recorded
        with executors.connect(executor, cells, m.gpu, m.cell_timeout_s, runs) as runner:
            return _night(m, sha, cells, store, runner, new)


def _night(m, sha: str, cells: list, store: Store, runner, new: bool) -> tuple[str, str | None]:
    owner = f"{socket.gethostname()}:{os.getpid()}:{token_hex(3)}"
    held = store.hold(sha, facts(), runner.name, owner, new)
    try:
        return _drive(m, cells, store, runner, held)
    finally:
        store.release(held)  # its claims (and lease) free now, not when they lapse


def _drive(m, cells: list, store: Store, runner, held: Held) -> tuple[str, str | None]:
    run_id = held.run_id
    recorded = {(c["model"], c["cell"]) for c in store.cells_of(run_id)}
    todo = [c for c in cells if (c.model, c.name) not in recorded]
    print(
        f"nightly run {run_id} ({_how(held, len(recorded))}): {len(todo)} cells, executor "
        f"{runner.name}, store {secrets.url(store.url)}"
    )
    runs = runner.runs  # where its cells' run folders are, and their logs
    log_dir = runs.local / "nightly" / "logs" / run_id
    with _heartbeat(store, held) as alive:

        def claim(cell) -> bool:
            alive()
            return store.claim(held, cell.model, cell.name)

        def done(result: dict) -> None:
            if alive.stopped is not None and result["status"] == "failed":
                raise alive.stopped  # a cell this driver stopped: the next driver runs it
            store.record_cell(run_id, result, held)  # LeaseLost where another took over
            alive()

        runner.run(todo, str(log_dir), done, claim)
        alive()
    runs.pull(f"nightly/logs/{run_id}")  # the workers' logs, from object storage
    left = {(c.model, c.name) for c in cells} - {
        (c["model"], c["cell"]) for c in store.cells_of(run_id)
    }
    if left:
        print(
            f"nightly run {run_id}: {len(left)} cells still running under another driver; "
            "the run ends when the last of them is recorded"
        )
    else:
        store.end_run(run_id)
    rows = summarize(store, run_id, m.thresholds)
    print(render(rows))
    print(f"  logs      {log_dir}")
    return verdict(rows)


def _how(held: Held, recorded: int) -> str:
    if held.joined:
        return (
            f"held by {held.holder}, seen {held.holder_seen_s or 0:.0f} s ago: this driver "
            "takes only the cells nobody has claimed"
        )
    if held.resumed:
        return f"resumed, {recorded} cells already recorded"
    if held.replaced:
        return f"new: run {held.replaced} not resumed, {held.why} since it started"
    return "new"


class _Alive:
    """Raises what stopped the driver (a lease taken, the database lost), once it has."""

    def __init__(self) -> None:
        self.stopped: Exception | None = None

    def __call__(self) -> None:
        if self.stopped is not None:
            raise self.stopped


@contextlib.contextmanager
def _heartbeat(store: Store, held: Held, every_s: float | None = None) -> Iterator[_Alive]:
    """Renew this driver's leases while it runs (a killed driver's lapse, and its cells free).
    Where a renewal fails — the lease taken, or the database silent through the store's tries
    (which end before the lease lapses: store.Limits) — the driver stops: its running cells are
    ended at once (local) and its next claim or record raises why (Ray's cells end with it)."""
    stop = threading.Event()
    alive = _Alive()

    def beat() -> None:
        while not stop.wait(every_s or HEARTBEAT_S):
            try:
                store.heartbeat(held)
            except Exception as e:  # LeaseLost, StoreError, or a bug: said by the next step
                alive.stopped = e
                cells_here.stop_running()
                return

    thread = threading.Thread(target=beat, name="nightly-heartbeat", daemon=True)
    thread.start()
    try:
        yield alive
    finally:
        stop.set()
        thread.join(5)


def verdict(rows: list[dict]) -> tuple[str, str | None]:
    """(outcome status, message): a failed cell is an error; a failed gate or a regression is a
    failed gate (exit 3); else ok."""
    failed = [f"{r['model']} × {r['cell']}" for r in rows if r["status"] == "failed"]
    if failed:
        return "internal_error", f"nightly: cells failed: {', '.join(failed)}"
    worse = [
        f"{r['model']} × {r['cell']}"
        for r in rows
        if r["status"] == "gate_failed" or r["regressions"] or r["baseline_regressions"]
    ]
    if worse:
        return "gate_failed", f"nightly: gate failed or regressed: {', '.join(worse)}"
    return "ok", None


def facts() -> dict:
    host = environment.host()
    host.pop("hostname", None)
    libraries = {**environment.library_versions(LIBRARIES), PACKAGE: serving_env.version()}
    return {"git": environment.git_commit(), "libraries": libraries, "host": host}


def summarize(store: Store, run_id: str, t: matrix.Thresholds) -> list[dict]:
    rows = []
    baseline = store.baseline()
    for c in sorted(store.cells_of(run_id), key=lambda c: (c["model"], c["cell"])):
        now = store.metrics_of(run_id, c["model"], c["cell"])
        previous = store.previous_ok(run_id, c["model"], c["cell"])
        found = (
            regress.compare(now, store.metrics_of(previous, c["model"], c["cell"]), t)
            if previous
            else []
        )
        base_found = []
        if baseline and baseline != run_id:
            base_found = regress.compare(now, store.metrics_of(baseline, c["model"], c["cell"]), t)
        rows.append(
            {
                **c,
                "metrics": now,
                "previous": previous,
                "regressions": found,
                "baseline": baseline if baseline != run_id else None,
                "baseline_regressions": base_found,
            }
        )
    return rows


def render(rows: list[dict]) -> str:
    head = (
        f"{'model':<12} {'cell':<14} {'status':<11} {'mean KL':>18} {'same top %':>12} "
        f"{'ppl ratio':>10} {'tok/s ratio':>12}  vs previous / baseline"
    )
    lines = [head]
    for r in rows:
        m = r["metrics"]
        kl = m.get("kl_mean")
        top = m.get("same_top_pct")
        ppl = m.get("ppl_ratio")
        tok = _last_ratio(m)
        verdict = _verdict(r["previous"], r["regressions"])
        if r["baseline"]:
            verdict += " / " + _verdict(r["baseline"], r["baseline_regressions"])
        lines.append(
            f"{r['model']:<12} {r['cell']:<14} {r['status']:<11} "
            f"{f'{kl.value:.3g}±{kl.se:.1g}' if kl else '-':>18} "
            f"{f'{top.value:.2f}' if top else '-':>12} {f'{ppl.value:.4f}' if ppl else '-':>10} "
            f"{f'{tok:.2f}×' if tok else '-':>12}  {verdict}"
        )
        if r.get("node") and "/" in r["node"]:  # a Ray node: host/node id, and its GPUs
            gpus = f", GPUs {','.join(r['gpus'])}" if r.get("gpus") else ""
            lines.append(f"    ran on {r['node']}{gpus}")
        if cal := r.get("calibration"):
            lines.append(f"    calibrated on {calibrated_on(cal)}")
        if r["error"]:
            lines.append(f"    error: {secrets.text(r['error'])}")  # may quote a URL
        for f in [*r["regressions"], *r["baseline_regressions"]]:
            lines.append(f"    REGRESSION {f.describe()}")
    return "\n".join(lines)


def calibrated_on(cal: dict) -> str:
    """`python-docs:calibration, 64 × ≤256 tokens, seed 42, ids 3f2a…`: the set and the hash of
    its exact token ids (two cells calibrated alike share it)."""
    source = cal["dataset"] + (f":{cal['split']}" if cal.get("split") else "")
    chat = ", chat template" if cal.get("chat_template") else ""
    return (f"{source}{chat}, {cal['samples']} × ≤{cal['max_seq_length']} tokens, seed "
            f"{cal['seed']}, token ids sha256 {cal['token_ids_sha256'][:12]}")  # fmt: skip


def _last_ratio(metrics: dict) -> float | None:
    ratios = sorted(
        (int(name[1:].split(".")[0]), m.value)
        for name, m in metrics.items()
        if name.endswith(".output_tok_s_ratio")
    )
    return ratios[-1][1] if ratios else None


def _verdict(reference: str | None, found: list) -> str:
    if not reference:
        return "first run"
    return f"REGRESSED ({len(found)})" if found else f"ok vs {reference}"
