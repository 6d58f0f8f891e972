"""The README's and jobs.md's output blocks are what their commands print (issue 55): each
marked block (pipeline/cli/doc_samples.py) against the same command in this session, line by
line, figures aside. Stale wording, a line added or dropped: `make docs-samples` rewrites them."""

from pipeline.cli import doc_samples
from tests.conftest import REPO, cli


def test_the_docs_sample_blocks_are_what_their_commands_print(evaluated, session_runs):
    evaluated("fp8")  # the shipped fp8's quantize and eval, cached: each command takes seconds
    checked = 0
    for page in doc_samples.PAGES:
        for argv, body in doc_samples.blocks((REPO / page).read_text()):
            result = cli(*argv.split(), runs=session_runs)
            assert result.returncode in (0, 3), result.stderr[-2000:]
            now = doc_samples.cleaned(result.stdout, session_runs)
            assert doc_samples.shape(body) == doc_samples.shape(now), f"{page}: `{argv}`"
            checked += 1
    assert checked >= 2  # the README's eval, jobs.md's quantize
