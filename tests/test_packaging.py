"""What `pip install .` ships: the wheel built from the project's files carries every file tg reads, and
a 2-rank job run from that install (a clean venv, not this checkout) uses the compiled shared-memory
engine, not the slot-ring fallback that a missing engine source falls back to with a warning."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

JOB = """
import numpy as np
import tg
import tg.distributed as dist
dist.init_process_group()
x = np.arange(5, dtype=np.float32) * (dist.get_rank() + 1)
dist.all_reduce(x)
print("from", tg.__file__, "sum", x.tolist(), flush=True)
"""


def project_files() -> list[str]:
    """The files git tracks (or would: untracked but not ignored), as the clean clone CI builds from."""
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout.split()
    return [f for f in out if (REPO / f).is_file()]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel `pip install .` would install, built from a copy of the project's files (the build
    writes build/ and *.egg-info next to its sources; the checkout stays as it is)."""
    src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("wheel")
    for name in project_files():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, src / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(out), str(src)], check=True, capture_output=True, timeout=300)
    (built,) = out.glob("tg-*.whl")
    return built


def test_the_wheel_carries_every_file_tg_reads(wheel):
    shipped = set(zipfile.ZipFile(wheel).namelist())
    sources = [f for f in project_files() if f.startswith("tg/")]
    missing = [f for f in sources if f not in shipped]
    assert not missing, f"the wheel lacks {missing}: name them in pyproject's [tool.setuptools.package-data]"
    assert any(f.endswith(".c") for f in sources)          # the check has something to check
    assert any(f.endswith("entry_points.txt") for f in shipped)


def test_a_job_from_the_installed_wheel_uses_the_compiled_engine(wheel, tmp_path):
    env_dir = tmp_path / "venv"
    # numpy and PyYAML come from this interpreter's site-packages; tg only from the wheel
    venv.EnvBuilder(system_site_packages=True, with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    # without PYTHONPATH (a checkout on it would be "tg, already installed": pip would install nothing)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TG_SHM", "TG_BACKEND", "PYTHONPATH"))}
    subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)],
                   check=True, capture_output=True, timeout=300, env=env)
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(JOB))
    env["TG_CACHE_DIR"] = str(tmp_path / "cache")
    r = subprocess.run([str(env_dir / "bin" / "tglaunch"), "--nproc", "2", str(script)], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "no shared-memory engine" not in r.stderr, r.stderr
    lines = [line for line in r.stdout.splitlines() if " sum " in line]
    assert len(lines) == 2
    for line in lines:
        where = line.split("from ", 1)[1].split(" sum")[0]
        assert Path(where).is_relative_to(env_dir), f"tg came from {where}, not the installed wheel"
        assert line.endswith("sum [0.0, 3.0, 6.0, 9.0, 12.0]")
    engines = [p.name for p in (tmp_path / "cache").rglob("*") if p.is_file()]
    assert engines, "the engine was not compiled into the job's cache"
