"""The benchmark schedule: both models at each level, repeat r A-then-B when even and B-then-A
when odd, so a drift in the host's load falls on both sides alike. vLLM's benchmark is replaced
by a recorder here (the schedule is what is tested; tests/e2e/serve runs the real one)."""

from pipeline.config.recipe import ServeSettings
from pipeline.engines.vllm import bench


def test_each_level_alternates_a_b_then_b_a_and_keeps_the_runs(monkeypatch, tmp_path):
    order = []

    def fake_bench(worker, server, side, concurrency, repeat, said):
        said("0/8 requests")  # what a run says while it lasts
        order.append((concurrency, repeat, side.key))
        tok_s = 100.0 if side.key == "original" else 150.0
        return {"completed": 8, "duration_s": 1.0, "output_tok_s": tok_s + repeat,
                "total_tok_s": tok_s, "requests_s": 1.0}  # fmt: skip

    monkeypatch.setattr(bench, "bench", fake_bench)
    s = ServeSettings(concurrency=[1, 4], repeats=3, num_prompts=8)
    sides = [bench.Side(k, tmp_path, k, s, tmp_path / k) for k in ("original", "quantized")]
    for side in sides:
        side.out.mkdir()
    results = {side.key: {"levels": []} for side in sides}
    bench._bench_alternately(sides, {"original": None, "quantized": None}, results, None)
    assert order == [
        (c, r, key)
        for c in (1, 4)
        for r in range(3)
        for key in (("original", "quantized") if r % 2 == 0 else ("quantized", "original"))
    ]
    level = results["quantized"]["levels"][1]
    assert level["concurrency"] == 4 and [run["repeat"] for run in level["runs"]] == [0, 1, 2]
    assert level["output_tok_s"] == 151.0  # the median of 150, 151, 152
    sequences = sorted(run["sequence"] for k in results for lv in results[k]["levels"]
                       for run in lv["runs"])  # fmt: skip
    assert sequences == list(range(12))
