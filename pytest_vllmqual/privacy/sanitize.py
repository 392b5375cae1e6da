"""Scrub private values out of anything that goes into the public report.

The public report is built from an allowlist of fields, but some allowed fields are free
text (error messages, log tails, the serve command, recipe paths). Everything that came from
the run passes :class:`Sanitizer` before it is written: secrets and API keys become
placeholders, and identifiers (hosts, IPs, GPUs, PCI slots, containers, home directories,
user names) become pseudonyms that are stable within one report, so that "host-A" in two
places still means the same machine. ``counts`` is the report's redaction summary.

Which host names and values are private is decided by what is this machine's or its
environment's (``privacy.learned_values``): its own names, the values of the environment the
server inherits and of the recipe's env, names the run registers (the endpoint's host), names
under private-network suffixes, and the shapes of addresses, GPU, PCI and container ids and
tokens. Every other name (a documentation link's host) is public text and stays as written.

Hash fields (``sha256``, ``*_sha256``, ``digest``) are never scrubbed: the report needs them
to name the private artifacts, and a 64-hex digest must not be mistaken for a container id.

Which names are secret (the recipe's env values, report fields, the engine's logged
non-default args) is the package's one secret policy, ``privacy.secret_policy``; its names
(``SECRET_WORDS``, ``SECRET_ENV_NAME``, ``SECRET_KEY_NAME``, ``REDACTED_PLACEHOLDER``,
``redact_args``) are re-exported here, where they were first defined, for a release.
"""

from __future__ import annotations

import getpass
import ipaddress
import os
import re
import socket
from collections.abc import Iterable, Mapping
from typing import Any

from .learned_values import PRIVATE_NAME_SOURCE, inherited_identifiers, is_loopback_name, is_run_bookkeeping
from .learned_values import machine_names as _machine_names
from .secret_policy import REDACTED_PLACEHOLDER, SECRET_ENV_NAME, SECRET_KEY_NAME, SECRET_WORDS, redact_args

__all__ = [
    "COMMON_ENV_WORDS", "ENV_PLACEHOLDER", "GENERIC_USER_NAMES", "HASH_FIELD", "HOME_PLACEHOLDER", "KINDS",
    "MIN_ENV_SECRET_LEN", "MIN_ENV_VALUE_LEN", "MIN_KNOWN_SECRET_LEN", "REDACTED_PLACEHOLDER", "SECRET_ENV_NAME",
    "SECRET_KEY_NAME", "SECRET_PLACEHOLDER", "SECRET_WORDS", "TOKEN_PLACEHOLDER", "USER_PLACEHOLDER", "Sanitizer",
    "redact_args", "scrub_test_report"
]

KINDS = (
    "secret",
    "token",
    "gpu_uuid",
    "container_id",
    "pci_bus_id",
    "hostname",
    "ip",
    "home_path",
    "user",
    "env_value",
)
"""Every kind of scrubbed value, in the order the scrubber applies them."""

SECRET_PLACEHOLDER = "<secret>"
TOKEN_PLACEHOLDER = "<token>"
HOME_PLACEHOLDER = "<home>"
USER_PLACEHOLDER = "<user>"
ENV_PLACEHOLDER = "<env>"

MIN_ENV_VALUE_LEN = 4
"""Recipe env values shorter than this ("1", "0|1") are settings that name nothing."""
COMMON_ENV_WORDS = frozenset(
    {"true", "false", "none", "null", "auto", "spawn", "fork", "forkserver", "info", "debug", "warning",
     "error", "yes", "no", "on", "off", "cpu", "cuda", "gpu", "fp8", "bf16", "fp16", "float16", "bfloat16",
     "float32", "half", "native", "xgrammar", "outlines", "guidance", "hermes", "json", "text", "utf-8"}
)
"""Recipe env values that are vocabulary, not identifiers; scrubbing them would mangle text."""
_ENV_PART_SPLIT = re.compile(r"[\s,;|=\[\]()<>\"']+")

MIN_KNOWN_SECRET_LEN = 4
MIN_ENV_SECRET_LEN = 8
"""Shorter env values ("1", "true") are settings, not secrets; scrubbing them would mangle text."""

HASH_FIELD = re.compile(r"(?i)(^|_)(sha256|digest)$")
_HASH_VALUE = re.compile(r"^(?:sha256:)?[0-9a-f]{64}$|^[^@\s]+@sha256:[0-9a-f]{64}$")

GENERIC_USER_NAMES = frozenset(
    {"root", "user", "admin", "nobody", "daemon", "ubuntu", "debian", "centos", "runner",
     "vscode", "jovyan", "ec2-user", "app", "vllm"}
)
"""User names that identify nobody; scrubbing the word "root" would eat "root cause"."""

_PRIVATE_NAMES = re.compile(PRIVATE_NAME_SOURCE, re.IGNORECASE)
_URL_USERINFO = re.compile(r"(?<=://)[^/\s:@]+:[^/\s@]+@")

_TOKEN_PATTERNS = (
    re.compile(r"\bhf_[A-Za-z0-9]{16,}"),
    re.compile(r"\bsk-(?:proj-|ant-|live-|test-)?[A-Za-z0-9_-]{16,}"),
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"),
    re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}"),
    re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}"),
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),
    re.compile(r"\bvq-[A-Za-z0-9_-]{20,}"),  # launch.base.new_api_key()
)
_BEARER = re.compile(r"(?i)\b(Bearer\s+)([A-Za-z0-9._~+/=-]{8,})")
_KEY_VALUE = re.compile(
    r"""(?ix)
    (["']?\b(?:api[_-]?key|hf[_-]?token|access[_-]?token|auth[_-]?token|token|secret|client[_-]?secret|
        password|passwd)["']?\s*[:=]\s*\[?\s*["']?)
    ([^\s"',}\]]+)
    """
)
_NOT_A_VALUE = frozenset({"none", "null", "true", "false", "''", '""'})
_NUMERIC = re.compile(r"^[\d.,:+-]+$")  # "first token: 0.53" is a timing, not a secret

_GPU_UUID = re.compile(
    r"\b(?:GPU|MIG)-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"
)
_PCI_FULL = re.compile(r"(?<![\w:])(?:[0-9a-fA-F]{8}|[0-9a-fA-F]{4}):[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]\b")
_PCI_SHORT = re.compile(r"(?i)(\b(?:pci|bus)[\w -]{0,12}?[:=]\s*)([0-9a-f]{2}:[0-9a-f]{2}\.[0-7])\b")
_HEX_ID = re.compile(r"(?<![0-9A-Za-z])(?<!sha256:)([0-9a-f]{64}|[0-9a-f]{12})(?![0-9A-Za-z])")
_CONTAINER_CONTEXT = re.compile(
    r"(?i)(container|docker|podman|libpod|crio|containerd|moby)"
)
_IMAGE_CONTEXT = re.compile(r"(?i)\bimage\b|digest|sha256")
_CONTEXT_WINDOW = 48

_IPS = re.compile(
    r"(?<![\w.])(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?![\w]|\.\d)"
    r"|(?<![\w:.])[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7}(?:\.\d{1,3}){0,3}(?:%[\w.-]+)?(?![\w:])"
)
"""IPv4, then IPv6 candidates (validated by ``ipaddress``), in one pass so pseudonyms follow the text."""

_HOME_UNIX = re.compile(r"/(?:home|Users)/([A-Za-z0-9._-]+)")
_HOME_ROOT = re.compile(r"(?<![\w.-])/root(?![\w.-])")
_HOME_WINDOWS = re.compile(r"(?i)\b[A-Z]:\\Users\\([^\\\s\"']+)")


def _letters(n: int) -> str:
    """0 -> A, 25 -> Z, 26 -> AA: pseudonym suffixes for hosts."""
    out = ""
    n += 1
    while n:
        n, rem = divmod(n - 1, 26)
        out = chr(ord("A") + rem) + out
    return out


class Sanitizer:
    """Scrubs secrets and identifiers from text; one instance per report.

    ``known_secrets`` are exact values that must never appear (the run's API key). By default
    the values of environment variables whose names look secret (``*TOKEN*``, ``*KEY*``,
    ``*SECRET*``, ``*PASSWORD*``), this machine's host name and the current user name are
    also scrubbed; pass ``environ``, ``hostname`` and ``username`` to control that (tests do).
    """

    def __init__(
        self,
        known_secrets: Iterable[str] = (),
        *,
        environ: Mapping[str, str] | None = None,
        hostname: str | None = None,
        username: str | None = None,
    ) -> None:
        self.counts: dict[str, int] = {}
        self._secrets: set[str] = set()
        self._pseudonyms: dict[str, dict[str, str]] = {kind: {} for kind in KINDS}
        self._aliases: dict[str, dict[str, str]] = {kind: {} for kind in KINDS}
        self._taken: set[str] = set()
        self._hostnames: set[str] = set()
        self._users: set[str] = set()
        self._container_ids: set[str] = set()
        for value in known_secrets:
            self.add_secret(value)
        self._env_values: set[str] = set()
        self._inherited: set[str] = set()
        self._kept: set[str] = set()
        self._env_pattern: tuple[frozenset[str], re.Pattern[str] | None] = (frozenset(), None)
        self._homes: set[str] = set()
        self.add_inherited_env(os.environ if environ is None else environ)
        own_host = socket.gethostname() if hostname is None else hostname
        if own_host:
            self.add_identifier("hostname", own_host)
        if hostname is None:
            self.learn_machine()
        if username is None:
            try:
                username = getpass.getuser()
            except (KeyError, OSError):
                username = ""
        if username:
            self.add_identifier("user", username)

    # -- registration -----------------------------------------------------------------

    def learn_machine(self) -> None:
        """This machine's own identifiers: host name and FQDN, their addresses, the user names
        of this process and its home directory (second line of defence behind the allowlist)."""
        names, _addresses = _machine_names()  # addresses are scrubbed by their shape (non-loopback)
        for name in names:
            self.add_identifier("hostname", name)
        for var in ("USER", "LOGNAME", "SUDO_USER", "USERNAME"):
            self.add_identifier("user", os.environ.get(var))
        for home in {os.environ.get("HOME") or "", os.path.expanduser("~")}:
            self.add_home(home)

    def add_home(self, path: str | None) -> None:
        """Scrub a home directory path (at least two levels deep, or /root) as ``<home>``."""
        if not path:
            return
        clean = path.rstrip("/")
        if clean == "/root" or clean.count("/") >= 2:
            self._homes.add(clean)

    def add_inherited_env(self, env: Mapping[str, str]) -> None:
        """The environment the server inherits (this process's, unless ``environ`` was given):
        secret-named values are secrets; every other value, and each identifier-shaped part of
        it, is private (``privacy.learned_values.inherited_identifiers``)."""
        for name, value in env.items():
            if SECRET_ENV_NAME.search(name) and len(value) >= MIN_ENV_SECRET_LEN:
                self._secrets.add(value)
            elif value and not is_run_bookkeeping(name):
                self._inherited.update(inherited_identifiers(value))

    def add_endpoint(self, url: str | None) -> None:
        """The host of a server URL the run talks to (``--vllmqual-endpoint``): an operator's machine."""
        from urllib.parse import urlsplit

        host = urlsplit(url).hostname if url and "://" in url else None
        self.add_identifier("hostname", host)

    def keep(self, *values: str | None) -> None:
        """Words the report names on purpose (the recipe's name, the served model's name): an
        inherited environment value equal to one is not scrubbed (``VLLMQUAL_RECIPE=tiny-cpu-4096``)."""
        self._kept.update(v for v in values if v)

    def add_env_values(self, env: Mapping[str, Any] | None) -> None:
        """Scrub every value of a recipe's env (and each identifier-like part of it): an operator's
        VLLM_LOGGING_PREFIX, a node name, a path. Short settings and common words are left."""
        for value in (env or {}).values():
            if value is None:
                continue
            text = str(value).strip()
            if self._env_worthy(text):
                self._env_values.add(text)
            for part in _ENV_PART_SPLIT.split(text):
                part = part.strip(".:/")
                # A part is scrubbed on its own only when it looks like an identifier (node-17,
                # a.b.c, ab:cd:ef), not a plain word ("models" would eat "/v1/models").
                if (len(part) >= 6 and self._env_worthy(part) and re.search(r"[\d._:-]", part)
                        and not re.fullmatch(r"[A-Z][A-Z0-9_]*", part)):  # a variable's name, not a value
                    self._env_values.add(part)

    @staticmethod
    def _env_worthy(text: str) -> bool:
        return (len(text) >= MIN_ENV_VALUE_LEN and any(c.isalpha() for c in text)
                and text.lower() not in COMMON_ENV_WORDS)

    def add_secret(self, value: str | None) -> None:
        """Never let ``value`` appear in the output (e.g. a per-run API key)."""
        if value and len(value) >= MIN_KNOWN_SECRET_LEN:
            self._secrets.add(value)

    def add_identifier(self, kind: str, value: str | None) -> None:
        """Scrub ``value`` wherever it appears, even without context (a container id, a host).

        ``kind`` is ``hostname``, ``container_id`` or ``user``; IPs, GPU UUIDs and PCI ids are
        found by their shape and need no registration.
        """
        if not value:
            return
        if kind == "hostname":
            lowered = value.lower()
            if is_loopback_name(lowered) or self._is_ip(lowered):
                return
            self._hostnames.add(lowered)
            short = lowered.split(".", 1)[0]
            if short != lowered and len(short) >= 3:
                # The short name and the FQDN are the same machine: one pseudonym.
                self._hostnames.add(short)
                self._alias("hostname", short, lowered)
        elif kind == "container_id":
            lowered = value.lower().removeprefix("sha256:")
            self._container_ids.add(lowered)
            if len(lowered) == 64:
                # docker shows the first 12 hex of the same id: one container, one pseudonym.
                self._container_ids.add(lowered[:12])
                self._alias("container_id", lowered[:12], lowered)
        elif kind == "user":
            if len(value) >= 3 and value.lower() not in GENERIC_USER_NAMES:
                self._users.add(value)
        else:
            raise ValueError(f"unknown identifier kind {kind!r}; use hostname, container_id or user")

    # -- scrubbing --------------------------------------------------------------------

    def scrub(self, text: str) -> str:
        """Return ``text`` with every secret and identifier replaced."""
        if not text:
            return text
        text = self._scrub_secrets(text)
        text = self._scrub_tokens(text)
        text = _GPU_UUID.sub(lambda m: self._pseudonym("gpu_uuid", m.group(0).upper()), text)
        text = self._scrub_containers(text)
        text = _PCI_FULL.sub(lambda m: self._pseudonym("pci_bus_id", _pci_key(m.group(0))), text)
        text = _PCI_SHORT.sub(
            lambda m: m.group(1) + self._pseudonym("pci_bus_id", _pci_key(m.group(2))), text
        )
        text = self._scrub_hosts(text)
        text = _IPS.sub(self._ip_replacement, text)
        text = self._scrub_home(text)
        return self._scrub_env_values(text)

    def scrub_obj(self, obj: Any, *, key: str | None = None) -> Any:
        """Scrub every string inside dicts/lists/tuples (keys included); other values pass.

        A string under a hash-named key (``sha256``, ``*_sha256``, ``digest``) that looks like
        a digest is returned as is.
        """
        if isinstance(obj, str):
            if key is not None and HASH_FIELD.search(key) and _HASH_VALUE.match(obj):
                return obj
            return self.scrub(obj)
        if isinstance(obj, Mapping):
            return {
                (self.scrub(k) if isinstance(k, str) else k): self.scrub_obj(v, key=k if isinstance(k, str) else None)
                for k, v in obj.items()
            }
        if isinstance(obj, list | tuple):
            return [self.scrub_obj(item, key=key) for item in obj]
        return obj

    def redact(self, kind: str = "secret") -> str:
        """Count one value the caller removed itself (a secret-named env value) and return its placeholder."""
        self._count(kind)
        return TOKEN_PLACEHOLDER if kind == "token" else SECRET_PLACEHOLDER

    def reserve(self, text: str) -> None:
        """Treat pseudonyms already present in ``text`` as taken (re-scrubbing a report)."""
        self._taken.update(_PSEUDONYM_ANYWHERE.findall(text))

    def redaction_summary(self) -> dict[str, int]:
        """Per kind, how many values were replaced so far (kinds with zero are left out)."""
        return {kind: self.counts[kind] for kind in KINDS if self.counts.get(kind)}

    # -- internals --------------------------------------------------------------------

    def _count(self, kind: str, n: int = 1) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + n

    def _alias(self, kind: str, alias: str, canonical: str) -> None:
        """Make ``alias`` share ``canonical``'s pseudonym (whichever was seen first)."""
        table = self._pseudonyms[kind]
        if alias in table and canonical not in table:
            table[canonical] = table[alias]
        self._aliases[kind][alias] = canonical

    def _next(self, kind: str, original: str) -> str:
        """The pseudonym of ``original``: the one it already has, or the next free one."""
        original = self._aliases[kind].get(original, original)
        table = self._pseudonyms[kind]
        if original in table:
            return table[original]
        n = 0
        while True:
            if kind == "hostname":
                name = f"host-{_letters(n)}"
            elif kind == "gpu_uuid":
                name = f"gpu{n}"
            elif kind == "ip":
                name = f"ip-{n + 1}"
            elif kind == "container_id":
                name = f"container-{n + 1}"
            elif kind == "pci_bus_id":
                name = f"pci-{n + 1}"
            else:
                raise ValueError(kind)
            if name not in self._taken:
                break
            n += 1
        self._taken.add(name)
        table[original] = name
        return name

    def _pseudonym(self, kind: str, original: str) -> str:
        """Stable pseudonym for ``original``; counts one replacement."""
        name = self._next(kind, original)
        self._count(kind)
        return name

    def _scrub_secrets(self, text: str) -> str:
        for secret in sorted(self._secrets, key=len, reverse=True):
            if secret in text:
                self._count("secret", text.count(secret))
                text = text.replace(secret, SECRET_PLACEHOLDER)
        return text

    def _scrub_env_values(self, text: str) -> str:
        """The recipe's env values and the inherited environment's, longest first, in one pass."""
        values = frozenset(self._env_values | (self._inherited - self._kept))
        if values != self._env_pattern[0]:
            alternatives = "|".join(re.escape(v) for v in sorted(values, key=len, reverse=True))
            self._env_pattern = (values, re.compile(alternatives) if values else None)
        pattern = self._env_pattern[1]
        if pattern is None:
            return text
        text, n = pattern.subn(ENV_PLACEHOLDER, text)
        if n:
            self._count("env_value", n)
        return text

    def _scrub_tokens(self, text: str) -> str:
        def token(_m: re.Match[str]) -> str:
            self._count("token")
            return TOKEN_PLACEHOLDER

        text = _URL_USERINFO.sub(lambda m: token(m) + "@", text)
        for pattern in _TOKEN_PATTERNS:
            text = pattern.sub(token, text)
        text = _BEARER.sub(lambda m: m.group(1) + token(m), text)

        def key_value(m: re.Match[str]) -> str:
            value = m.group(2)
            if value.lower() in _NOT_A_VALUE or value.startswith("<") or len(value) < 4 or _NUMERIC.match(value):
                return m.group(0)
            return m.group(1) + token(m)

        return _KEY_VALUE.sub(key_value, text)

    def _scrub_containers(self, text: str) -> str:
        def replace(m: re.Match[str]) -> str:
            value = m.group(1)
            if value not in self._container_ids:
                line_start = text.rfind("\n", 0, m.start()) + 1
                window = text[max(line_start, m.start() - _CONTEXT_WINDOW): m.start()]
                if not _CONTAINER_CONTEXT.search(window) or _IMAGE_CONTEXT.search(window):
                    return value
                self.add_identifier("container_id", value)
            return self._pseudonym("container_id", value)

        return _HEX_ID.sub(replace, text)

    def _host_pseudonym(self, host: str) -> str:
        lowered = host.lower()
        return self._pseudonym("hostname", lowered)

    @staticmethod
    def _is_ip(value: str) -> bool:
        try:
            ipaddress.ip_address(value.strip("[]").split("%", 1)[0])
        except ValueError:
            return False
        return True

    def _scrub_hosts(self, text: str) -> str:
        """Names under private-network suffixes and the names this sanitizer learned (this
        machine's, the endpoint's), in one pass (pseudonyms in text order)."""
        if not self._hostnames:
            pattern = _PRIVATE_NAMES
        else:
            names = "|".join(re.escape(n) for n in sorted(self._hostnames, key=len, reverse=True))
            pattern = re.compile(PRIVATE_NAME_SOURCE + r"|(?<![\w.-])(?P<own>" + names + r")(?![\w-]|\.[\w-])",
                                 re.IGNORECASE)

        def replace(m: re.Match[str]) -> str:
            host = m.group("fqdn") or m.group("own")
            if is_loopback_name(host) or _is_pseudonym(host):
                return host
            return self._host_pseudonym(host)

        return pattern.sub(replace, text)

    def _ip_replacement(self, m: re.Match[str]) -> str:
        raw = m.group(0)
        try:
            address = ipaddress.ip_address(raw.split("%", 1)[0])
        except ValueError:
            return raw
        if address.is_loopback or address.is_unspecified:
            return raw
        return self._pseudonym("ip", address.compressed)

    def _scrub_home(self, text: str) -> str:
        for home in sorted(self._homes, key=len, reverse=True):
            pattern = re.compile(re.escape(home) + r"(?![\w.-])")
            text, n = pattern.subn(HOME_PLACEHOLDER, text)
            if n:
                self._count("home_path", n)

        def unix_home(m: re.Match[str]) -> str:
            self.add_identifier("user", m.group(1))
            self._count("home_path")
            return HOME_PLACEHOLDER

        text = _HOME_UNIX.sub(unix_home, text)
        text = _HOME_WINDOWS.sub(unix_home, text)

        def root_home(_m: re.Match[str]) -> str:
            self._count("home_path")
            return HOME_PLACEHOLDER

        text = _HOME_ROOT.sub(root_home, text)
        if self._users:
            names = sorted(self._users, key=len, reverse=True)
            users = re.compile(r"(?<![\w-])(" + "|".join(re.escape(n) for n in names) + r")(?![\w-])")

            def user(_m: re.Match[str]) -> str:
                self._count("user")
                return USER_PLACEHOLDER

            text = users.sub(user, text)
        return text


_PSEUDONYM_BODY = r"(?:host-[A-Z]+|ip-\d+|gpu\d+|container-\d+|pci-\d+)"
_PSEUDONYM = re.compile(r"^" + _PSEUDONYM_BODY + r"$")
_PSEUDONYM_ANYWHERE = re.compile(r"(?<![\w-])" + _PSEUDONYM_BODY + r"(?![\w-])")


def _is_pseudonym(value: str) -> bool:
    return bool(_PSEUDONYM.match(value))


def _pci_key(value: str) -> str:
    """NVML writes 00000000:3B:00.0, lspci 0000:3b:00.0: one device, one pseudonym."""
    parts = value.lower().split(":")
    if len(parts) == 3:
        parts[0] = parts[0][-4:]
    else:
        parts = ["0000", *parts]
    return ":".join(parts)


def scrub_test_report(report: Any, sanitizer: Sanitizer) -> None:
    """junit XML and the terminal carry a pytest test report's failure text, skip reason and
    captured output (every phase): scrub them like the report's free text (second line of defence)."""
    if isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
        path, lineno, reason = report.longrepr
        report.longrepr = (path, lineno, sanitizer.scrub(str(reason)))
    elif report.longrepr is not None:
        text = str(report.longrepr)
        scrubbed = sanitizer.scrub(text)
        if scrubbed != text:
            report.longrepr = scrubbed
    if report.sections:
        report.sections = [(title, sanitizer.scrub(content)) for title, content in report.sections]
