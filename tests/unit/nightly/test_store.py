"""The results store under concurrent writers (SQLite in WAL with a busy timeout)."""

import multiprocessing


def _write_many(db: str, writer: int, n: int) -> None:
    from pipeline.nightly.store import Store

    store = Store(db)
    facts = {"git": {}, "libraries": {}, "host": {}}
    for i in range(n):
        run_id = f"w{writer}-{i}"
        store.start_run(run_id, "sha", facts, "local")
        result = {"model": "m", "cell": "c", "recipe": "r", "status": "ok", "stages": {}}
        metrics = [
            {"name": f"x{k}", "value": k, "se": 0.1, "better": "lower", "kind": "quality"}
            for k in range(20)
        ]
        store.record_cell(run_id, {**result, "metrics": metrics})
        store.end_run(run_id)


def test_two_writers_at_once(tmp_path):
    from pipeline.nightly.store import Store

    db = f"sqlite:///{tmp_path}/shared.db"
    Store(db)  # schema first, as a running nightly would have
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_write_many, args=(db, w, 40)) for w in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(300)
    assert [p.exitcode for p in procs] == [0, 0]
    store = Store(db)
    runs = store.run_ids()
    assert len(runs) == 80 and all(r["ended"] for r in runs)
    assert all(len(store.metrics_of(r["id"], "m", "c")) == 20 for r in runs)
