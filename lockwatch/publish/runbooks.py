"""``/runbooks``: the runbooks this lockwatch ships, as one HTML page.

Every runbook link lockwatch gives (the status page, the notifications, the
log, the alerts' ``runbook_url``) points here unless
``incidents.runbook_base_url`` names other runbooks, so a link opens whatever
version is installed, offline too. The text is ``docs/runbooks.md`` of the
repository, carried in the package as ``lockwatch/docs/runbooks.md``; each
section's anchor is its alert's name in lower case (``#lockwatchlockconvoy``),
as ``model/incident_text.runbook_link`` makes it and as GitHub renders it.
"""

from __future__ import annotations

import html
import re
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING

from lockwatch import __version__

if TYPE_CHECKING:
    from markdown_it.rules_core import StateCore

_NOT_IN_ANCHOR = re.compile(r"[^\w\- ]")
_STYLE = (
    "body{font:15px/1.5 system-ui,sans-serif;max-width:52rem;margin:2rem auto;padding:0 1rem;"
    "color:#1d2330}code,pre{font:13px ui-monospace,monospace;background:#f2f4f7}"
    "pre{padding:.6rem;overflow:auto}h2{border-top:1px solid #d7dbe3;padding-top:1rem}"
    "table{border-collapse:collapse}td,th{border:1px solid #d7dbe3;padding:.2rem .5rem}"
)


def anchor(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped,
    spaces as hyphens.

    >>> anchor("LockwatchLockConvoy"), anchor("Incidents and their next step")
    ('lockwatchlockconvoy', 'incidents-and-their-next-step')
    """
    return _NOT_IN_ANCHOR.sub("", heading.strip().lower()).replace(" ", "-")


def _heading_ids(state: StateCore) -> None:
    tokens = state.tokens
    for index, token in enumerate(tokens):
        if token.type == "heading_open" and index + 1 < len(tokens):
            token.attrSet("id", anchor(tokens[index + 1].content))


def runbooks_text() -> str:
    """The Markdown of the runbooks the package carries."""
    return (resources.files("lockwatch") / "docs" / "runbooks.md").read_text(encoding="utf-8")


@cache
def runbooks_page() -> bytes:
    """The runbooks as one HTML page, rendered once (raw HTML in the text is
    shown as text, never passed through): markdown_it is loaded by the first
    request for the page, not by every lockwatch that never serves it."""
    from markdown_it import MarkdownIt

    markdown = MarkdownIt("commonmark", {"html": False}).enable("table")
    markdown.core.ruler.push("heading_ids", _heading_ids)
    body = markdown.render(runbooks_text())
    title = html.escape(f"lockwatch {__version__} runbooks")
    page = (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{title}</title>'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<style>{_STYLE}</style></head><body>{body}"
        f"<footer><p>{title}</p></footer></body></html>"
    )
    return page.encode("utf-8")
