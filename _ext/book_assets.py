"""Sphinx extension for the offline book: drop duplicated <script> entries.

sphinx-thebe registers its inline configuration script once per notebook page *and*
once per build, so notebook pages declare ``const THEBE_JS_URL`` twice and the browser
raises "Identifier 'THEBE_JS_URL' has already been declared" on every chapter.
"""

from __future__ import annotations


def _dedupe_scripts(app, pagename, templatename, context, doctree) -> None:
    seen, unique = set(), []
    for script in context.get("script_files", []):
        attributes = getattr(script, "attributes", {}) or {}
        # Inline scripts come with filename None or "": both mean "no file".
        key = (getattr(script, "filename", str(script)) or "", attributes.get("body"))
        if key not in seen:
            seen.add(key)
            unique.append(script)
    context["script_files"] = unique


def setup(app):
    # Late priority: run after every extension has added its scripts to the page.
    app.connect("html-page-context", _dedupe_scripts, priority=100000)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
