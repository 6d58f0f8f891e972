"""The CUDA serving env is pinned like the tested CPU one: requirements/serve-cuda.txt pins every
package, and agrees with vLLM's own requirements (the Requires-Dist of PyPI's vLLM 0.32.0 wheel,
kept in requirements/vllm-0.32.0-cuda.METADATA) as they apply on Linux x86_64 with Python 3.11."""

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from pipeline.engines.vllm import cuda_builds
from tests.conftest import REPO

TARGET = {
    **default_environment(),
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "python_version": "3.11",
    "python_full_version": "3.11.7",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
}


def _pins() -> dict[str, str]:
    lines = (REPO / "requirements/serve-cuda.txt").read_text().splitlines()
    pins = {}
    for line in lines:
        if line.strip() and not line.startswith("#"):
            name, version = line.split("==")
            pins[canonicalize_name(name)] = version.strip()
    return pins


def test_every_package_is_pinned_and_the_builds_are_the_ones_setup_names():
    pins = _pins()
    assert len(pins) >= 100
    assert pins["vllm"] == cuda_builds.VLLM and pins["torch"] == cuda_builds.TORCH


def test_the_lock_meets_each_of_vllms_own_requirements_on_linux_x86_64():
    pins = _pins()
    text = (REPO / "requirements/vllm-0.32.0-cuda.METADATA").read_text()
    assert f"Version: {cuda_builds.VLLM}" in text
    needed = [Requirement(x.split(": ", 1)[1]) for x in text.splitlines()
              if x.startswith("Requires-Dist: ")]  # fmt: skip
    applied = [r for r in needed if r.marker is None or r.marker.evaluate({**TARGET, "extra": ""})]
    assert len(applied) > 50
    unmet = []
    for r in applied:
        locked = pins.get(canonicalize_name(r.name))
        if locked is None or not r.specifier.contains(locked, prereleases=True):
            unmet.append(f"{r} (locked: {locked})")
    assert unmet == []
