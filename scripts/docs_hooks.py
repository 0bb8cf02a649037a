"""MkDocs hook (mkdocs.yml ``hooks:``): links from a page to a file of the repository
outside ``docs/`` (``../tests/...``, ``../README.md``; GitHub follows them) have no page
on the site. Each becomes its link text when the file exists, and a warning when it does
not, so ``mkdocs build --strict`` still fails on a dead one."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any

log = logging.getLogger("mkdocs.hooks.repository_links")


class _SeveralExceptions(logging.Filter):
    """The project's docstrings say ``:raises TypeError, ValueError: ...`` (two types, one
    reason), which griffe's Sphinx parser warns about; the text is still shown. Only that
    warning is dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not ("Failed to parse exception directive" in message and ":raises " in message
                    and "," in message.split(":raises ", 1)[1].split(":", 1)[0])


logging.getLogger("mkdocs.plugins.griffe").addFilter(_SeveralExceptions())

LINK = re.compile(r"(?<!!)\[(?P<text>[^\]\n]+)\]\((?P<target>\.\./[^)\s#]+)(?:#[^)\s]*)?\)")


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    docs = Path(os.path.abspath(config["docs_dir"]))
    root = docs.parent
    here = (docs / page.file.src_path).parent

    def replace(match: re.Match[str]) -> str:
        path = Path(os.path.normpath(here / match["target"]))  # lexically: a symlinked folder stays inside
        if docs in path.parents:
            return match[0]  # a page of the site: MkDocs checks it
        if root not in path.parents or not path.exists():
            log.warning("%s links to %s, which is not a file of the repository", page.file.src_path,
                        match["target"])
        return match["text"]

    return LINK.sub(replace, markdown)
