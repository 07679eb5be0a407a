"""lockwatch: makes PostgreSQL advisory-lock and job-queue failures loud, early and explained."""

from __future__ import annotations

__version__ = "0.1.0"
