"""The release artefacts: ``python -m build`` makes an sdist and a wheel; the
wheel, installed into a fresh venv, is a working lockwatch that carries the
alert rules, the dashboard and the systemd unit and writes them out."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from lockwatch.cli import main
from tests.fixtures.paths import ROOT

pytestmark = pytest.mark.slow

BUNDLED = {
    "lockwatch/bundled/alerts/lockwatch.rules.yml": ROOT / "alerts" / "lockwatch.rules.yml",
    "lockwatch/bundled/grafana/lockwatch.json": ROOT / "grafana" / "lockwatch.json",
    "lockwatch/bundled/systemd/lockwatch.service": ROOT / "systemd" / "lockwatch.service",
}


def run(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=600, check=False
    )
    assert result.returncode == 0, f"{args}:\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    # The wheel is built from the sdist, so a file MANIFEST.in forgets is missed here too.
    run(sys.executable, "-m", "build", "--outdir", out, ROOT, cwd=out)
    return out


@pytest.fixture(scope="module")
def venv(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("venv")
    (wheel,) = dist.glob("lockwatch-*.whl")
    run(sys.executable, "-m", "venv", home / "venv", cwd=home)
    run(home / "venv" / "bin" / "pip", "install", "-q", wheel, cwd=home)
    yield home / "venv"
    shutil.rmtree(home, ignore_errors=True)


def test_the_wheel_carries_the_rules_dashboard_unit_and_sql(dist: Path) -> None:
    (wheel,) = dist.glob("lockwatch-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        for name, source in BUNDLED.items():
            assert archive.read(name) == source.read_bytes(), name
    assert "lockwatch/sample/sql/advisory_locks.sql" in names
    assert "lockwatch/py.typed" in names


def test_the_sdist_carries_the_top_level_directories(dist: Path) -> None:
    (sdist,) = dist.glob("lockwatch-*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert {"setup.py", "alerts/lockwatch.rules.yml", "grafana/lockwatch.json"} <= names
    assert "systemd/lockwatch.service" in names


def test_the_installed_lockwatch_runs_and_exports_from_its_own_files(
    venv: Path, tmp_path: Path
) -> None:
    lockwatch = venv / "bin" / "lockwatch"
    # Run from elsewhere, so nothing can come from the checkout.
    help_text = run(lockwatch, "--help", cwd=tmp_path).stdout
    assert "export" in help_text and "run" in help_text

    for what in ("rules", "dashboard", "systemd"):
        run(lockwatch, "export", what, tmp_path / what, cwd=tmp_path)

    assert (tmp_path / "rules" / "lockwatch.rules.yml").read_bytes() == (
        ROOT / "alerts" / "lockwatch.rules.yml"
    ).read_bytes()
    assert not list((tmp_path / "rules").glob("*.test.yml")), "promtool tests are not rules"
    assert (tmp_path / "dashboard" / "lockwatch.json").read_bytes() == (
        ROOT / "grafana" / "lockwatch.json"
    ).read_bytes()
    assert (tmp_path / "dashboard" / "provisioning" / "lockwatch.yml").exists()
    assert (tmp_path / "systemd" / "lockwatch.service").read_bytes() == (
        ROOT / "systemd" / "lockwatch.service"
    ).read_bytes()
    where = run(
        venv / "bin" / "python",
        "-c",
        "import lockwatch.commands.export as e; print(e.bundle_root('rules'))",
        cwd=tmp_path,
    ).stdout
    assert where.startswith(str(venv)), where


def test_export_leaves_a_file_that_differs_unless_forced(tmp_path: Path) -> None:
    unit = tmp_path / "lockwatch.service"
    unit.write_text("# edited by hand\n")

    refused = CliRunner().invoke(main, ["export", "systemd", str(tmp_path)])
    assert refused.exit_code == 1
    assert "would overwrite files that differ" in refused.output
    assert unit.read_text() == "# edited by hand\n"

    forced = CliRunner().invoke(main, ["export", "systemd", str(tmp_path), "--force"])
    assert forced.exit_code == 0, forced.output
    assert unit.read_bytes() == (ROOT / "systemd" / "lockwatch.service").read_bytes()
    assert forced.output.strip() == str(unit)
