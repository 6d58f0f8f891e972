"""A stage's work in a process of its own, so that what it holds on the GPUs is freed when it
ends: a later vLLM engine starts only when free memory ≥ gpu_memory_utilization × total
(`request_memory`, vllm/v1/worker/utils.py), and torch's caching allocator, compressed-tensors'
onloading and GPTQ's Hessians keep memory in the process that used them until it exits.

    entry, cached = own_process.call(execute, stage)

The child is forked, so it shares what the parent prepared (the model materialized, the stage's
inputs); its return value or its exception comes back through a pipe. CUDA must not be
initialised in the parent (torch then forbids CUDA in a forked child): the parent's GPU queries
go through NVML (PYTORCH_NVML_BASED_CUDA_CHECK=1), and where CUDA is initialised already the
call runs in this process and says why. `torch.cuda.is_initialized()` misses one such parent:
a plain `torch.cuda.is_available()` (no NVML check) initialises the driver and poisons fork, yet
leaves it False. torch's own flag for that is in the child (`torch.cuda._is_in_bad_fork()`, set
by its fork handler): the child asks it first and hands the work back when it is set.
"""

import multiprocessing
import os
import signal
import sys
import traceback
from collections.abc import Callable
from typing import TypeVar

from pipeline.core import stopping
from pipeline.core.errors import PipelineError, Terminated

T = TypeVar("T")


def call(fn: Callable[..., T], *args) -> T:
    if _cuda_initialised():
        print("  (CUDA is initialised in this process: the stage runs in it)", file=sys.stderr)
        return fn(*args)
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    ctx = multiprocessing.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_child, args=(send, fn, args))
    # a stop that lands during the fork waits until the child exists, then is handed on below:
    # taken at once, it left the child working on unstopped (and holding the command's stderr)
    before = signal.pthread_sigmask(signal.SIG_BLOCK, STOPS)
    try:
        try:
            child.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, before)
        send.close()
        kind, value = receive.recv()
    except EOFError:  # killed (OOM, a signal) before it could answer
        child.join()
        why = f"the stage's process ended without a result (exit {child.exitcode})"
        raise RuntimeError(why) from None
    except KeyboardInterrupt as e:  # the child records the stop, then ends
        if child.pid is None:  # the fork itself failed: no child to stop
            raise
        if isinstance(e, Terminated):  # Ctrl-C reached the child's group too; SIGTERM did not
            os.kill(child.pid, signal.SIGTERM)
        child.join(timeout=30)
        if child.is_alive():
            child.kill()  # it ignores further stops: hung while recording this one
            child.join()
        raise
    child.join()
    if kind == "bad-fork":
        print(f"  ({BAD_FORK}: the stage runs in this process)", file=sys.stderr)
        return fn(*args)
    if kind == "error":
        raise value
    return value


STOPS = {signal.SIGINT, signal.SIGTERM}
BAD_FORK = "CUDA was initialised in this process before the fork (torch.cuda.is_available()"
BAD_FORK += " without PYTORCH_NVML_BASED_CUDA_CHECK=1)"


def _child(send, fn: Callable, args: tuple) -> None:
    try:
        stopping.once_in_child()
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS)  # blocked by the parent for the fork
        result = ("bad-fork", None) if _in_bad_fork() else ("ok", fn(*args))
    except BaseException as e:  # the parent raises it: its type decides the exit code
        if not isinstance(e, PipelineError | KeyboardInterrupt):  # a bug or a library's crash
            traceback.print_exc()
        result = ("error", _picklable(e))
    send.send(result)
    send.close()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # no atexit handlers of the parent's libraries in the child


def _picklable(e: BaseException) -> BaseException:
    import pickle

    try:
        pickle.loads(pickle.dumps(e))
        return e
    except Exception:
        return RuntimeError(f"{type(e).__name__}: {e}")


def _cuda_initialised() -> bool:
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_initialized())


def _in_bad_fork() -> bool:
    """In the child: torch's fork handler marked it (the parent had initialised CUDA)."""
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda._is_in_bad_fork())


def spawned(target: Callable[..., object], *args, what: str) -> None:
    """`target(*args)` in a spawned process (nothing inherited): what a model build holds —
    an optimizer's state, a dequantized float32 copy, torch's allocator — goes when it ends
    instead of counting as the peak memory of the command that needed the model (a fresh
    clone's first `make quantize` said `peak RSS 1.07 GiB, planned 0.62 GiB` with tiny-llama's
    training in its process). Ctrl-C ends the child too."""
    child = multiprocessing.get_context("spawn").Process(target=target, args=args)
    child.start()
    try:
        child.join()
    except KeyboardInterrupt:
        child.terminate()
        child.join()
        raise
    if child.exitcode != 0:
        raise RuntimeError(f"{what} failed (exit {child.exitcode}): see above")
