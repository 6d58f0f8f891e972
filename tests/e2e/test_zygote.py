"""tests/zygote.py: a CLI call forked from the worker's zygote is the call a fresh process makes."""

import os
import subprocess

import pytest

from tests.conftest import _zygote, cli


@pytest.mark.parametrize(
    "args",
    [
        ["recipes"],
        ["schema", "outcome"],
        ["quantize", "--recipe", "nope"],  # exit 2, one line on stderr
        ["eval", "--recipe", "fp8", "--backend", "nope"],  # argparse's own exit 2
    ],
)
def test_forked_and_fresh_calls_print_and_exit_alike(tmp_path, args):
    forked = cli(*args, runs=tmp_path)
    fresh = cli(*args, runs=tmp_path, fresh=True)
    assert _zygote().fits({**os.environ, "RUNS_DIR": str(tmp_path)})  # it was forked
    assert forked.args == fresh.args
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        fresh.returncode,
        fresh.stdout,
        fresh.stderr,
    )


def test_a_variable_the_libraries_read_at_import_means_a_fresh_process():
    import torch  # noqa: F401  (sets KMP_INIT_AT_FORK & co. here too: still fits)

    zygote = _zygote()
    assert zygote.fits(dict(os.environ))
    assert zygote.fits({**os.environ, "RUNS_DIR": "/elsewhere", "TOKENIZERS_PARALLELISM": "x"})
    assert not zygote.fits({**os.environ, "HF_ENDPOINT": "http://127.0.0.1:1"})
    assert not zygote.fits({k: v for k, v in os.environ.items() if k != "HOME"})
    assert not zygote.fits({**os.environ, "OMP_NUM_THREADS": "7"})


def test_a_forked_call_past_its_timeout_is_killed(tmp_path):
    with pytest.raises(subprocess.TimeoutExpired) as raised:
        cli("quantize", "--recipe", "gptq", "--force", runs=tmp_path, timeout=2)
    assert raised.value.timeout == 2
    again = cli("recipes", runs=tmp_path)  # the zygote serves the next call
    assert again.returncode == 0 and "gptq" in again.stdout
