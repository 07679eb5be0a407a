"""Build hook: the wheel carries the alert rules, the Grafana dashboard and the
systemd unit inside the package, as ``lockwatch/bundled/{alerts,grafana,systemd}``.

The repository keeps them at the top level (their one source of truth);
``lockwatch export`` finds them in either place. Everything else about the
build is declared in pyproject.toml.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

BUNDLED = ("alerts", "grafana", "systemd")


class BuildPyWithBundles(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:
            # An editable install reads the checkout's own directories.
            return
        root = Path(__file__).resolve().parent
        for name in BUNDLED:
            source = root / name
            if not source.is_dir():
                raise SystemExit(f"setup.py: {name}/ is missing; the wheel must carry it")
            shutil.copytree(
                source,
                Path(self.build_lib, "lockwatch", "bundled", name),
                dirs_exist_ok=True,
                ignore=shutil.ignore_patterns("__pycache__", ".*"),
            )


setup(cmdclass={"build_py": BuildPyWithBundles})
