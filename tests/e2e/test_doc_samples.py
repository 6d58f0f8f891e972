"""The README's and jobs.md's output blocks are what their commands print (issue 55): each
marked block (pipeline/cli/doc_samples.py) against the same command in this session, line by
line, figures aside. Stale wording, a line added or dropped: `make docs-samples` rewrites them.
A serve's and a publish's blocks are checked by the tests that run them (CHECKED_IN)."""

from pipeline.cli import doc_samples
from tests.conftest import REPO, cli


def test_the_docs_sample_blocks_are_what_their_commands_print(evaluated, session_runs):
    for recipe in ("fp8", "w4a16-rtn", "gptq"):  # evaluated as shipped, cached: seconds each
        evaluated(recipe)
    checked = 0
    for page in doc_samples.PAGES:
        text = (REPO / page).read_text()
        for argv, _ in doc_samples.blocks(text) + doc_samples.excerpts(text):
            if argv in doc_samples.CHECKED_IN:
                continue
            result = cli(*argv.split(), runs=session_runs)
            assert doc_samples.printed_as_output(argv, result.returncode), result.stderr[-2000:]
            assert not (why := doc_samples.mismatch(argv, result.stdout, session_runs)), why
            checked += 1
    assert checked >= 3  # the README's eval, jobs.md's quantize and compare


def test_each_block_checked_elsewhere_is_checked_there():
    assert doc_samples.CHECKED_IN  # the serve excerpt and the publish dry run
    for argv, test_file in doc_samples.CHECKED_IN.items():
        doc_samples.block(argv)  # the block is still marked
        source = (REPO / test_file).read_text()
        assert f'"{argv}"' in source and "doc_samples.mismatch(" in source, test_file
