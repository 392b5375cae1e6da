"""junit XML: an equivalence section as junit, and scrubbing, the second line of defence behind
the plugin's own redaction.

pytest writes the machine's host name and every failure message into ``--junitxml``; the
plugin rewrites that file at the end of the session (atomically, through
:mod:`~pytest_vllmqual.atomic_io`) so it carries no host name and nothing the run's
:class:`~pytest_vllmqual.privacy.sanitize.Sanitizer` would have scrubbed.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_vllmqual.atomic_io import write_text_atomic
from pytest_vllmqual.not_measured import Measured, junit_element, not_measured, of_equivalence, of_figure
from pytest_vllmqual.privacy.sanitize import Sanitizer

__all__ = ["equivalence_junit", "redact_junit_hostname", "scrub_junit"]


def equivalence_junit(section: Mapping[str, Any], line: str, *, name: str = "equivalence",
                      title: str = "vllmqual comparison") -> str:
    """An equivalence section (an A/B comparison's or a drift's) as junit: one testcase for the
    verdict (its message ``line``, the terminal's) and one per figure, each passed, failed or
    skipped as ``not measured: ...`` by the one rule (:mod:`pytest_vllmqual.not_measured`)."""
    import xml.etree.ElementTree as ET

    figures = list(section.get("figures") or [])
    cases = [("verdict", of_equivalence(section.get("verdict")), line)]
    cases += [(str(f.get("figure")), of_figure(f.get("status")),
               f"{f.get('label')} {f.get('point')} [{f.get('low')}, {f.get('high')}] against {f.get('threshold')}: "
               f"{f.get('status')}") for f in figures]
    failed = sum(1 for _, measured, _ in cases if measured is Measured.FAILED)
    suite = ET.Element("testsuite", name=name, tests=str(len(cases)), failures=str(failed), errors="0",
                       skipped=str(sum(1 for _, measured, _ in cases if measured is Measured.NOT_MEASURED)))
    for case_name, measured, message in cases:
        case = ET.SubElement(suite, "testcase", classname=name, name=case_name)
        element = junit_element(measured)
        if element is not None:
            ET.SubElement(case, element, message=not_measured(message) if element == "skipped" else message)
    root = ET.Element("testsuites", name=title)
    root.append(suite)
    return ET.tostring(root, encoding="unicode")


def redact_junit_hostname(path: Path) -> bool:
    """pytest writes this machine's name into its junit XML (``<testsuite hostname=...>``);
    replace it with ``redacted``, atomically. Returns whether the file was changed."""
    import platform
    from xml.sax.saxutils import quoteattr

    node = platform.node()
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError:
        return False
    needle = f"hostname={quoteattr(node)}"
    if not node or needle not in text:
        return False
    write_text_atomic(text.replace(needle, 'hostname="redacted"'), Path(path), what="junit XML")
    return True


def scrub_junit(path: Path, sanitizer: Sanitizer) -> bool:
    """Scrub every attribute and text of a junit XML file (failure messages, skip reasons,
    system-out/err, properties): the second line of defence behind the plugin's own scrubbing.
    Parsed as XML, so a placeholder such as ``<secret>`` is escaped, never injected. Returns
    whether the file changed."""
    import xml.etree.ElementTree as ET

    try:
        tree = ET.parse(path)
    except (OSError, ET.ParseError):
        return False
    changed = False
    for element in tree.iter():
        for key, value in list(element.attrib.items()):
            scrubbed = sanitizer.scrub(value)
            if scrubbed != value:
                element.set(key, scrubbed)
                changed = True
        for attr in ("text", "tail"):
            value = getattr(element, attr)
            if value:
                scrubbed = sanitizer.scrub(value)
                if scrubbed != value:
                    setattr(element, attr, scrubbed)
                    changed = True
    if changed:
        text = ET.tostring(tree.getroot(), encoding="unicode")
        write_text_atomic('<?xml version="1.0" encoding="utf-8"?>' + text, Path(path), what="junit XML")
    return changed

