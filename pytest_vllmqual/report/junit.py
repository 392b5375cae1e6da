"""junit XML: the one builder of a junit document (an equivalence section's, a fleet's), and
scrubbing, the second line of defence behind the plugin's own redaction.

pytest writes the machine's host name and every failure message into ``--junitxml``; the
plugin rewrites that file at the end of the session (atomically, through
:mod:`~pytest_vllmqual.atomic_io`) so it carries no host name and nothing the run's
:class:`~pytest_vllmqual.privacy.sanitize.Sanitizer` would have scrubbed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_vllmqual.atomic_io import write_text_atomic
from pytest_vllmqual.equivalence import layer_cases
from pytest_vllmqual.not_measured import Measured, junit_element, not_measured, of_equivalence, of_figure
from pytest_vllmqual.privacy.sanitize import Sanitizer

__all__ = ["JunitCase", "JunitSuite", "equivalence_junit", "junit_document", "redact_junit_hostname", "scrub_junit"]


@dataclass(frozen=True)
class JunitCase:
    """One testcase: passed when ``outcome`` is None, else the element it carries (``failure``,
    ``skipped`` or ``error``) with ``message``; ``time`` and ``properties`` only where known."""

    classname: str
    name: str
    outcome: str | None = None
    message: str = ""
    time: str | None = None
    properties: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class JunitSuite:
    """One testsuite: its name and its testcases, counted into its attributes."""

    name: str
    cases: Sequence[JunitCase]


def junit_document(title: str, suites: Sequence[JunitSuite], *, declaration: bool = False) -> str:
    """A junit document: ``testsuites`` named ``title``, each suite with its tests, failures, errors and
    skipped counted from its cases, so a count never disagrees with the elements."""
    import xml.etree.ElementTree as ET

    root = ET.Element("testsuites", name=title)
    for each in suites:
        count = {kind: str(sum(1 for case in each.cases if case.outcome == kind)) for kind in ("failure", "error", "skipped")}
        suite = ET.SubElement(root, "testsuite", name=each.name, tests=str(len(each.cases)), failures=count["failure"],
                              errors=count["error"], skipped=count["skipped"])
        for case in each.cases:
            attributes = {"classname": case.classname, "name": case.name}
            if case.time is not None:
                attributes["time"] = case.time
            element = ET.SubElement(suite, "testcase", attributes)
            if case.properties:
                properties = ET.SubElement(element, "properties")
                for key, value in case.properties:
                    ET.SubElement(properties, "property", name=key, value=value)
            if case.outcome is not None:
                ET.SubElement(element, case.outcome, message=case.message)
    return ET.tostring(root, encoding="unicode", xml_declaration=declaration)


def equivalence_junit(section: Mapping[str, Any], line: str, *, name: str = "equivalence",
                      title: str = "vllmqual comparison") -> str:
    """An equivalence section (an A/B comparison's or a drift's) as junit: one testcase for the
    verdict (its message ``line``, the terminal's) and one per figure, each passed, failed or
    skipped as ``not measured: ...`` by the one rule (:mod:`pytest_vllmqual.not_measured`); then, in
    a suite of their own, the statuses the record holds for the promotion rule, each layer, each
    item family and each depth bucket (shown as written: junit judges nothing)."""
    figures = list(section.get("figures") or [])
    cases = [("verdict", of_equivalence(section.get("verdict")), line)]
    cases += [(str(f.get("figure")), of_figure(f.get("status")),
               f"{f.get('label')} {f.get('point')} [{f.get('low')}, {f.get('high')}] against {f.get('threshold')}: "
               f"{f.get('status')}") for f in figures]
    junit_cases = [_case(name, case_name, measured, message) for case_name, measured, message in cases]
    layered = [_case(f"{name}.{group}", case_name, measured, message)
               for group, case_name, measured, message in layer_cases(section)]
    return junit_document(title, [JunitSuite(name, junit_cases)]
                          + ([JunitSuite(f"{name} layers", layered)] if layered else []))


def _case(classname: str, name: str, measured: Measured, message: str) -> JunitCase:
    element = junit_element(measured)
    return JunitCase(classname, name, element, not_measured(message) if element == "skipped" else message)


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

