"""`make setup` installs with uv, which reads no pip configuration: the host's pip settings reach
it as arguments (pipeline/core/pip_settings.py). Read through pip itself and applied by the uv
that `make setup` bootstraps (build/uv), against a wheel folder of two versions."""

import os
import subprocess
import sys
import zipfile
from pathlib import Path

from pipeline.core import pip_settings

REPO = Path(__file__).resolve().parents[3]
UV = REPO / "build" / "uv" / "bin" / "uv"


def _wheel(folder: Path, version: str) -> None:
    name = f"qp_probe-{version}"
    with zipfile.ZipFile(folder / f"{name}-py3-none-any.whl", "w") as whl:
        whl.writestr("qp_probe/__init__.py", "")
        whl.writestr(f"{name}.dist-info/METADATA",
                     f"Metadata-Version: 2.1\nName: qp-probe\nVersion: {version}\n")  # fmt: skip
        whl.writestr(f"{name}.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\n"
                     "Root-Is-Purelib: true\nTag: py3-none-any\n")  # fmt: skip
        whl.writestr(f"{name}.dist-info/RECORD", "")


def _pip_env(tmp_path: Path, config: str, **env: str) -> dict[str, str]:
    (tmp_path / "pip.conf").write_text(config)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    return {**clean, "PIP_CONFIG_FILE": str(tmp_path / "pip.conf"), **env}


def _args(env: dict[str, str]) -> list[str]:
    done = subprocess.run([sys.executable, "-m", "pipeline.core.pip_settings"], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    return done.stdout.split()


def _values(args: list[str], flag: str) -> list[str]:
    return [args[i + 1] for i, arg in enumerate(args) if arg == flag]


def test_pips_precedence_holds_variables_over_install_over_global(tmp_path):
    env = _pip_env(tmp_path, "[global]\nfind-links = /g\nindex-url = https://mirror/simple\n"
                             "[install]\nfind-links = /i\n", PIP_FIND_LINKS="/e1 /e2")  # fmt: skip
    args = _args(env)
    assert args[:2] == ["--index-strategy", "unsafe-best-match"]  # pip's rule: best across indexes
    # (this host's global pip.conf may add more flags)
    assert _values(args, "--default-index") == ["https://mirror/simple"]
    assert _values(args, "--find-links") == ["/e1", "/e2"]


def test_uv_installs_from_the_hosts_wheel_folder_under_its_constraint(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "1.0")
    _wheel(wheels, "2.0")
    (tmp_path / "constraints.txt").write_text("qp-probe==1.0\n")
    env = _pip_env(tmp_path, f"[global]\nno-index = true\nfind-links = {wheels}\n"
                             f"constraint = {tmp_path / 'constraints.txt'}\n")  # fmt: skip
    args = _args(env)
    assert "--no-index" in args
    target = tmp_path / "env"
    subprocess.run([UV, "venv", "-q", "--no-python-downloads", "--python", sys.executable, target],
                   check=True, timeout=60)  # fmt: skip
    uv_env = {k: v for k, v in os.environ.items() if not k.startswith("UV_")}
    done = subprocess.run([UV, "pip", "install", "--dry-run", "--python", target / "bin/python",
                           *args, "qp-probe"], env=uv_env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "qp-probe==1.0" in done.stderr  # the folder's, capped by the host's constraint
    bare = subprocess.run([UV, "pip", "install", "--dry-run", "--offline", "--python",
                           target / "bin/python", "qp-probe"], env=uv_env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert bare.returncode != 0  # without the host's settings uv would not find it


def test_no_pip_config_is_pips_defaults():
    assert pip_settings.uv_args(pip_settings.listed([])) == ["--index-strategy",
                                                             "unsafe-best-match"]  # fmt: skip
