"""Recipes from the commands operators already have, and the command a recipe will run.

``recipe_from_command`` turns a ``vllm serve MODEL --flag …`` line (or ``python -m
vllm.entrypoints.openai.api_server --model …``, optionally after ``env K=V``) or a ``docker run
… IMAGE@sha256:… --flag …`` line into a recipe mapping: the flags the recipe schema knows become
recipe keys, every other flag goes verbatim to ``serve.extra_args``, ``-e``/``K=V`` values to
the launcher env. Secrets (``--api-key``, ``HF_TOKEN=…``: a name the package's secret policy,
``privacy.secret_policy.SECRET_KEY_NAME``, calls secret) are refused: they belong in the environment,
never in a recipe that ends up in a public report.

``launch.command_line`` is the inverse: the exact argv (subprocess) or ``docker run`` line (docker) a
run starts, and ``recipe_from_command(command_line(r))`` gives back every key that shapes it.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_vllmqual.errors import RecipeError
from pytest_vllmqual.launch.registry import launcher_class
from pytest_vllmqual.privacy.secret_policy import SECRET_KEY_NAME
from pytest_vllmqual.recipe.gate_settings import SMOKE_PROMPT
from pytest_vllmqual.recipe.installed_vllm import MODULE_FORM, InstalledVllm
from pytest_vllmqual.records import LauncherKind

# vllm serve flag -> (section, key, type). One table: parsing and the README's key table use it.
FLAG_KEYS: dict[str, tuple[str, str, str]] = {
    "--served-model-name": ("identity", "served_model_name", "str"),
    "--revision": ("identity", "revision", "str"),
    "--host": ("launcher", "host", "str"),
    "--port": ("launcher", "port", "int"),
    "--tensor-parallel-size": ("serve", "tensor_parallel_size", "int"),
    "--max-model-len": ("serve", "max_model_len", "int"),
    "--decode-context-parallel-size": ("serve", "decode_context_parallel_size", "int"),
    "--max-num-seqs": ("serve", "max_num_seqs", "int"),
    "--max-num-batched-tokens": ("serve", "max_num_batched_tokens", "int"),
    "--gpu-memory-utilization": ("serve", "gpu_memory_utilization", "float"),
    "--kv-cache-dtype": ("serve", "kv_cache_dtype", "str"),
    "--speculative-config": ("serve", "speculative_config", "json"),
    "--kv-offloading-size": ("serve", "kv_offloading_size_gib", "float"),
    "--kv-offloading-backend": ("serve", "kv_offloading_backend", "str"),
    "--tool-call-parser": ("serve", "tool_call_parser", "str"),
    "--reasoning-parser": ("serve", "reasoning_parser", "str"),
    "--enable-auto-tool-choice": ("serve", "enable_auto_tool_choice", "bool"),
}
FLAG_ALIASES = {"-tp": "--tensor-parallel-size", "-dcp": "--decode-context-parallel-size"}
# docker run options that take a value; those without one are flags (--rm, -d, -it, ...).
DOCKER_VALUE_OPTIONS = {"-e", "--env", "--gpus", "--ipc", "--shm-size", "-v", "--volume", "-p", "--publish",
                        "--name", "--runtime", "--network", "--net", "--entrypoint", "--env-file", "-u", "--user",
                        "-w", "--workdir", "--mount", "--ulimit", "--cpus", "--memory", "-m", "--device",
                        "--cap-add", "--security-opt", "--label", "-l", "--platform", "--pull", "--restart",
                        "--stop-timeout", "--add-host", "--hostname", "-h"}
IGNORED_DOCKER_OPTIONS = {"--rm", "-d", "--detach", "-it", "-i", "-t", "--interactive", "--tty", "--init",
                          "--runtime", "--network", "--net", "--ulimit", "--security-opt", "--cap-add",
                          "--label", "-l", "--platform", "--pull", "--restart", "--privileged", "--hostname", "-h"}


@dataclass
class Conversion:
    """A recipe mapping built from a command, and what the operator should know about it."""

    raw: dict[str, Any]
    notes: list[str] = field(default_factory=list)


def _refuse_secret(what: str, name: str) -> None:
    raise RecipeError(
        f"{what} {name!r} is a secret, and a recipe is published with every report. Fix: leave it out of the "
        "command and keep it in the environment: the API key through VLLM_API_KEY (or the variable named by "
        "launcher.api_key_env), a hub token as HF_TOKEN in the environment of the run (the docker launcher "
        "passes HF_TOKEN and HUGGING_FACE_HUB_TOKEN through).", key=name)


def _split_flags(tokens: list[str]) -> list[str]:
    """``--flag=value`` becomes ``--flag value`` (one spelling for parsing)."""
    out: list[str] = []
    for token in tokens:
        if token.startswith("--") and "=" in token:
            flag, _, value = token.partition("=")
            out += [flag, value]
        else:
            out.append(token)
    return out


def _typed(kind: str, flag: str, value: str) -> Any:
    try:
        if kind == "int":
            return int(value)
        if kind == "float":
            return float(value)
        if kind == "json":
            return json.loads(value)
    except ValueError:
        raise RecipeError(f"{flag} {value!r} is not a valid {kind}. Fix: correct the value in the command.",
                          key=flag) from None
    return value


def _serve_args(tokens: list[str], raw: dict[str, Any], notes: list[str]) -> str | None:
    """Map serve flags into ``raw``; returns the model named by ``--model`` or the first positional."""
    model: str | None = None
    extra: list[str] = []
    tokens = _split_flags(tokens)
    i = 0
    while i < len(tokens):
        token = FLAG_ALIASES.get(tokens[i], tokens[i])
        nxt = tokens[i + 1] if i + 1 < len(tokens) else None
        takes_value = nxt is not None and not (nxt.startswith("--") or re.fullmatch(r"-[A-Za-z]+", nxt))
        if token.startswith("-") and SECRET_KEY_NAME.search(token.lstrip("-")):
            _refuse_secret("flag", token)
        if token == "--model" and nxt is not None:
            model = nxt
            i += 2
            continue
        if not token.startswith("-"):
            if model is None:
                model = token
            else:
                extra.append(token)
            i += 1
            continue
        known = FLAG_KEYS.get(token)
        if known is None:
            extra += [token, nxt] if takes_value and nxt is not None else [token]
            i += 2 if takes_value else 1
            continue
        section, key, kind = known
        if kind == "bool":
            raw[section][key] = True
            i += 1
            continue
        if nxt is None:
            raise RecipeError(f"{token} needs a value. Fix: complete the command.", key=token)
        raw[section][key] = _typed(kind, token, nxt)
        i += 2
    if extra:
        raw["serve"]["extra_args"] = extra
        notes.append(f"kept as serve.extra_args (no recipe key): {shlex.join(extra)}")
    return model


def _env_assignment(text: str, env: dict[str, str], notes: list[str]) -> None:
    name, sep, value = text.partition("=")
    if SECRET_KEY_NAME.search(name):
        if not sep:  # `-e HF_TOKEN`: handed through from the host, no value in the command
            notes.append(f"-e {name}: passed through from the environment at run time, not stored")
            return
        _refuse_secret("environment variable", name)
    if not sep:
        notes.append(f"-e {name} without a value is not stored: set launcher.env.{name} if it matters")
        return
    env[name] = value


def _identity_from_model(raw: dict[str, Any], model: str | None, notes: list[str]) -> None:
    if model is None:
        raise RecipeError("the command names no model (a positional MODEL or --model). Fix: add it.", key="model")
    looks_local = model.startswith(("/", "./", "../", "~"))
    if raw["identity"].get("model_path"):
        pass
    elif looks_local:
        raw["identity"]["model_path"] = model
        raw["identity"].setdefault("checkpoint", Path(model).name or model)
    else:
        raw["identity"]["checkpoint"] = model
    raw["identity"].setdefault("served_model_name", model)


def _base(name: str, runtime_version: str | None) -> dict[str, Any]:
    return {
        "name": name,
        "description": "",
        "pinned": False,
        "identity": {"runtime_version": runtime_version or "unknown"},
        "launcher": {},
        "serve": {},
    }


def _finish(raw: dict[str, Any], notes: list[str], runtime_version: str | None) -> Conversion:
    identity = raw["identity"]
    revision = identity.get("revision")
    pinned = bool(revision and re.fullmatch(r"[0-9a-f]{40}", revision)) and (
        launcher_class(raw["launcher"]["kind"]).unpinned_reason(raw) is None)
    raw["pinned"] = pinned
    if not pinned:
        notes.append("pinned: false (a pinned recipe needs a 40-hex --revision and, for docker, IMAGE@sha256:...)")
    if runtime_version is None:
        notes.append("identity.runtime_version is 'unknown': set it to what GET /version reports "
                     "(--runtime-version), or the identity gate reports a mismatch")
    raw["serve"].setdefault("tensor_parallel_size", 1)
    if "max_model_len" not in raw["serve"]:
        raise RecipeError("the command has no --max-model-len, and a recipe pins the context length it qualifies. "
                          "Fix: add --max-model-len N to the command.", key="--max-model-len")
    raw["description"] = "Converted from a command by `vllmqual recipe from-command`."
    # The default smoke prompt, written out: the one a small instruct model answers within the
    # smoke's tokens, so the ladder's post-probe smokes do not fail on an essay.
    raw["gates"] = {"smoke": {"prompt": SMOKE_PROMPT}}
    return Conversion(raw, notes)


def recipe_from_command(argv: list[str], *, name: str, runtime_version: str | None = None,
                        installed: InstalledVllm | None = None) -> Conversion:
    """A recipe mapping from a ``vllm serve`` / ``python -m vllm…`` / ``docker run`` argv.

    ``installed`` is the vLLM of the machine the recipe is written on (``installed_vllm()``):
    a subprocess recipe then gets its version as ``runtime_version`` (unless one is given), and
    a ``vllm serve`` line becomes the module form where that console script cannot start.
    """
    if not argv:
        raise RecipeError("no command given. Fix: vllmqual recipe from-command -- vllm serve MODEL --flag ...")
    raw = _base(name, runtime_version)
    notes: list[str] = []
    env: dict[str, str] = {}
    tokens = list(argv)
    if tokens[0] == "env":
        tokens = tokens[1:]
    while tokens and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", tokens[0]):
        _env_assignment(tokens.pop(0), env, notes)
    if not tokens:
        raise RecipeError("the command has only environment assignments. Fix: add the vllm serve command.")
    if Path(tokens[0]).name == "docker":
        return _from_docker(tokens, raw, env, notes, runtime_version)
    if Path(tokens[0]).name == "vllm" and len(tokens) > 1 and tokens[1] == "serve":
        command, rest = tokens[:2], tokens[2:]
    elif len(tokens) > 2 and tokens[1] == "-m" and tokens[2].startswith("vllm."):
        first = "{python}" if tokens[0] in (sys.executable, "{python}") else tokens[0]
        command, rest = [first, *tokens[1:3]], tokens[3:]
    else:
        raise RecipeError(f"the command starts {shlex.join(tokens[:3])!r}; from-command reads `vllm serve MODEL ...`, "
                          "`python -m vllm.entrypoints.openai.api_server --model ...` or `docker run ... IMAGE ...`. "
                          "Fix: pass one of those after `--`.")
    if installed is not None:
        command, runtime_version = _for_installed(command, runtime_version, installed, raw, notes)
    raw["launcher"] = {"kind": LauncherKind.SUBPROCESS.value, "command": command}
    model = _serve_args(rest, raw, notes)
    _identity_from_model(raw, model, notes)
    if env:
        raw["launcher"]["env"] = env
    return _finish(raw, notes, runtime_version)


def _for_installed(command: list[str], runtime_version: str | None, installed: InstalledVllm,
                   raw: dict[str, Any], notes: list[str]) -> tuple[list[str], str | None]:
    """The command and runtime version that work with the vLLM installed here."""
    if runtime_version is None:
        runtime_version = installed.version
        raw["identity"]["runtime_version"] = runtime_version
        notes.append(f"identity.runtime_version {runtime_version} is the installed {installed.distribution} "
                     "distribution's version")
    if Path(command[0]).name == "vllm" and not installed.console_script_starts:
        notes.append(f"launcher.command is the module form: vLLM is installed here as {installed.distribution}, "
                     "without the `vllm` package metadata its console script asks for, so `vllm serve` "
                     "dies at start (PackageNotFoundError)")
        command = list(MODULE_FORM)
    return command, runtime_version


def _from_docker(tokens: list[str], raw: dict[str, Any], env: dict[str, str], notes: list[str],
                 runtime_version: str | None) -> Conversion:
    if len(tokens) < 2 or tokens[1] not in ("run", "create"):
        raise RecipeError("a docker command must be `docker run ... IMAGE ...`. Fix: pass the run line.")
    options = _DockerOptions()
    i = 2
    image: str | None = None
    while i < len(tokens):
        token = tokens[i]
        if not token.startswith("-"):
            image = token
            i += 1
            break
        option, value, i = _option_value(tokens, i)
        options.read(option, token, value, env, notes)
    if image is None:
        raise RecipeError("the docker command names no image. Fix: add IMAGE@sha256:<digest> before the vllm flags.")
    runtime_version = _identity_from_image(raw, image, runtime_version, notes)
    serve_tokens = tokens[i:]
    if serve_tokens[:2] == ["vllm", "serve"]:
        serve_tokens = serve_tokens[2:]
    model = _serve_args(serve_tokens, raw, notes)
    _identity_from_mounts(raw, model, options.mounts, notes)
    # --host/--port after the image are the container's own address; the recipe's are the published ones (-p).
    raw["launcher"] = {**options.launcher, "docker": options.docker}
    if env:
        raw["launcher"]["env"] = env
    return _finish(raw, notes, runtime_version)


def _option_value(tokens: list[str], i: int) -> tuple[str, str, int]:
    """The docker option at ``tokens[i]``, its value ("" for a flag) and the index after them."""
    token = tokens[i]
    option, sep, inline = token.partition("=") if token.startswith("--") else (token, "", "")
    if option not in DOCKER_VALUE_OPTIONS:
        return option, "", i + 1
    if sep:
        return option, inline, i + 1
    if i + 1 < len(tokens):
        return option, tokens[i + 1], i + 2
    raise RecipeError(f"docker option {option} needs a value. Fix: complete the command.", key=option)


@dataclass
class _DockerOptions:
    """What the docker options before the image say about the recipe's launcher."""

    docker: dict[str, Any] = field(default_factory=lambda: {"ipc_host": False})
    mounts: dict[str, str] = field(default_factory=dict)
    """Container path -> host path (a local model is mounted, then named by it)."""
    launcher: dict[str, Any] = field(default_factory=lambda: {"kind": LauncherKind.DOCKER.value})

    def read(self, option: str, token: str, value: str, env: dict[str, str], notes: list[str]) -> None:
        if option in ("-e", "--env"):
            _env_assignment(value, env, notes)
        elif option == "--gpus":
            self._gpus(value.strip("\"'"), notes)
        elif option == "--ipc":
            self.docker["ipc_host"] = value == "host"
        elif option == "--shm-size":
            self.docker["shm_size"] = value
        elif option in ("-v", "--volume"):
            host_path, _, mount_spec = value.partition(":")
            target = mount_spec.split(":", 1)[0]
            if target == "/root/.cache/huggingface":
                self.docker["model_cache"] = host_path
            else:
                self.mounts[target] = host_path
        elif option in ("-p", "--publish"):
            parts = value.split(":")
            if len(parts) == 3:
                self.launcher["host"], self.launcher["port"] = parts[0], int(parts[1])
            elif len(parts) == 2:
                self.launcher["port"] = int(parts[0])
        elif option == "--name":
            self.docker["container_name"] = value
        elif option == "--stop-timeout":
            self.docker["stop_timeout_s"] = int(value)
        elif option in IGNORED_DOCKER_OPTIONS:
            pass
        elif option == "--env-file":
            notes.append(f"--env-file {value} ignored: put the non-secret variables into launcher.env")
        else:
            notes.append(f"docker option {token} ignored (no recipe key)")

    def _gpus(self, spec: str, notes: list[str]) -> None:
        if spec.startswith("device="):
            self.docker["gpus"] = [g for g in spec.removeprefix("device=").split(",") if g]
        elif spec.isdigit():
            self.docker["gpus"] = int(spec)
        else:
            notes.append(f"--gpus {spec}: the recipe asks for tensor_parallel_size GPUs instead")


def _identity_from_image(raw: dict[str, Any], image: str, runtime_version: str | None, notes: list[str]) -> str | None:
    """The image pins the identity; its tag gives the runtime version when none was given."""
    raw["identity"]["image"] = image
    if runtime_version is None:
        tag = re.search(r":v?(\d+\.\d+\.\d+[^@]*)(?:@|$)", image)
        if tag:
            runtime_version = tag.group(1)
            raw["identity"]["runtime_version"] = runtime_version
            notes.append(f"identity.runtime_version {runtime_version} read from the image tag")
    return runtime_version


def _identity_from_mounts(raw: dict[str, Any], model: str | None, mounts: dict[str, str], notes: list[str]) -> None:
    """A model served from a mounted folder is named by its host path; other mounts are dropped."""
    if model is not None and model in mounts:
        raw["identity"]["model_path"] = mounts[model]
        raw["identity"].setdefault("checkpoint", Path(mounts[model]).name or model)
    _identity_from_model(raw, model, notes)
    for target, host_path in mounts.items():
        if target != model:
            notes.append(f"volume {host_path}:{target} ignored: the recipe mounts only the HF cache "
                         "(launcher.docker.model_cache) and a local model (identity.model_path)")
    if raw["identity"].get("model_path") and model not in mounts:
        notes.append("a model path inside the container is not a host path: set identity.model_path to the host "
                     "directory to mount, or use the checkpoint id")


__all__ = ["Conversion", "recipe_from_command"]
