"""How a docs block is matched against what its command printed (pipeline/cli/doc_samples.py)."""

from pipeline.cli.doc_samples import cleaned, figures_off, shows

PRINTED = """serve tiny-llama × fp8: done; original model: served beside it
  c  metric         original    quantized
  1  out tok/s        153.33        27.80
  1  TTFT p50 ms      147.62        69.75
  4  out tok/s        210.90       107.20
  4  TTFT p50 ms      441.73       142.83
SLO: TTFT ≤ 1000 ms (levels measured: 1,4)
  results   runs/tiny-llama/fp8/serve/<fingerprint>/results.json
"""


def test_figures_and_the_count_of_repeated_rows_may_differ_but_not_the_lines():
    three_levels = PRINTED.replace(
        "SLO", " 16  out tok/s   274.24   303.68\n 16  TTFT p50 ms   1,759   502.22\nSLO"
    )
    assert shows(three_levels, PRINTED)
    assert not shows(PRINTED.replace("results ", "outcome "), PRINTED)
    assert not shows(PRINTED + "  plot      runs/x.png\n", PRINTED)


def test_an_excerpt_shows_some_lines_in_order_and_nothing_the_command_does_not_print():
    excerpt = "serve tiny-llama × fp8: done\n  …  (the levels)\nSLO: TTFT ≤ 1000 ms\n"
    assert shows(excerpt, PRINTED, excerpt=True)
    backwards = "SLO: TTFT ≤ 1000 ms\nserve tiny-llama × fp8: done\n"
    assert not shows(backwards, PRINTED, excerpt=True)
    assert not shows("served tiny-llama: done\n", PRINTED, excerpt=True)


def test_what_differs_by_host_or_run_is_masked_and_nothing_else(tmp_path):
    """A run root, the home folder, the host's name and a Ray node's id read as on the page; a
    duration's unit and a nightly run's id are figures; a changed word is not."""
    import socket
    from pathlib import Path

    runs = tmp_path / "runs-here"
    node = "ab" * 6  # Ray's node id as a cell prints it (its first 12)
    printed = (
        f"nightly run 20261206T012345-0a1b2c (new): 2 cells\n    ran on {socket.gethostname()}/"
        f"{node}\n  logs      {runs}/nightly/logs/20261206T012345-0a1b2c\n"
        f"disk total  ~23.4 GiB under {Path.home()}/.cache/huggingface/hub, {runs}; 57.2 GiB\n"
        "time        ~42 s (measured)\n"
    )
    page = (
        "nightly run 20261203T202332-dd6118 (new): 2 cells\n    ran on <host>/<node id>\n"
        "  logs      runs/nightly/logs/20261203T202332-dd6118\n"
        "disk total  ~23.4 GiB under ~/.cache/huggingface/hub, runs; 54.1 GiB\n"
        "time        ~8 min (measured)\n"
    )
    assert shows(page, cleaned(printed, runs))
    assert cleaned("gptq.python-docs  64  05c1bb60050f  4.49e-05", runs).split()[2] == "<sha256>"
    assert not shows(page.replace("logs ", "log "), cleaned(printed, runs))
    # a ratio where one host served the cell, `-` where another could not
    row = "tiny-llama   gptq   ok   4.02e-05±8e-06   99.53   0.9998   {}  first run\n"
    assert shows(row.format("0.41×"), row.format("-"))
    # a confidence interval's bounds, each with its sign, are figures
    flips = "gptq.python-docs   64   {} 1/0 ×1.00 [1.00,1.00], 23/32\n"
    assert shows(flips.format("[+0.00,+0.00]"), flips.format("[-0.01,+0.00]"))


def test_verdicts_and_exit_codes_are_compared_word_for_word_wherever_they_stand():
    """A block's head was all that was compared: a verdict after `: ` or `(` went unchecked
    (jobs.md's "indistinguishable"). Figures there still differ by host; verdicts may not."""
    pair = (
        "  gptq.python-docs vs gptq.python-docs-chat: {} (Δ {}; the 95% CI {} … +1.3e-05 holds 0)\n"
    )
    page = pair.format("indistinguishable", "+6.31e-06", "-8.23e-07")
    assert shows(page, pair.format("indistinguishable", "+1.02e-05", "-2.40e-06"))
    assert not shows(page, pair.format("worse beyond the floor", "+6.31e-06", "-8.23e-07"))
    order = "  gptq < w4a16-rtn (data-aware rounding vs nearest): {} (1.82e-01 vs 4.34e-01)\n"
    assert not shows(order.format("holds"), order.format("does not hold"))
    ended = "nightly: cells failed; exit {}\n"
    assert shows(ended.format(3), ended.format(3)) and not shows(ended.format(3), ended.format(1))


def test_a_measured_figure_is_compared_within_the_stated_tolerance_where_it_stands():
    """tiny-llama's drift moves between trainings (8.7e-05 and 1.07e-04 here): within 50% it is
    the block's; an order of magnitude off (another model's, a changed formula's) it is stale."""
    block = "heldout  16863  0.9999±0.0001  8.70e-05±1.7e-06  99.25±0.07\nfp8  1.07e-04 ± 5.0e-06\n"
    retrained = block.replace("8.70e-05", "1.07e-04").replace("16863", "17001")
    assert figures_off(block, retrained) == []  # a count is not a measured figure
    stale = block.replace("1.07e-04 ± 5.0e-06", "2.10e-03 ± 5.0e-05")
    assert figures_off(block, stale) == ["fp8  1.07e-04 ± 5.0e-06: 1.07e-04 → 2.10e-03"]
