"""One pytest session's qualification run: what the controller and an xdist worker share.

An *arm* is one recipe run in this session (the default recipe, a ``recipe`` marker's recipe,
or an A/B or campaign arm). The run exists in two kinds, as pytest-xdist splits its session:
``controller.ControllerRun`` owns the servers (at most one alive at a time), merges the gate
records per arm and writes the reports; ``worker.WorkerRun`` is an xdist worker's view of the
one server the controller handed over. ``QualRun`` is what the plugin's fixtures ask of either.
"""

from __future__ import annotations

import abc
import dataclasses
import os
from pathlib import Path
from typing import Any

from pytest_vllmqual.clock import utc_now, utc_stamp
from pytest_vllmqual.errors import RecipeError
from pytest_vllmqual.gates.registry import family_of
from pytest_vllmqual.launch.base import ProgressFn, ServerHandle
from pytest_vllmqual.privacy.sanitize import Sanitizer
from pytest_vllmqual.recipe.loader import resolve_recipe, resolve_recipe_path
from pytest_vllmqual.recipe.model import Recipe
from pytest_vllmqual.recipe.overrides import with_overrides
from pytest_vllmqual.records import GateRecord

from .arms import Arm, ArmSpec
from .invocation import SortKeyFn, header_lines, local_path_shown, order_of_tests, reproduce_line
from .server import ServerGuard
from .settings import Setting, Settings

__all__ = ["QualRun", "gate_junit_properties", "session_recipe"]


def session_recipe(settings: Settings) -> tuple[Settings, Recipe]:
    """The session's recipe: discovered from the endpoint when no recipe was chosen, else
    resolved by name or path; ``--vllmqual-set`` overrides applied. Raises RecipeError, or
    OSError when a discovered recipe cannot be written."""
    if settings.endpoint.value and settings.recipe.source == "embedded default":
        from pytest_vllmqual.recipe.from_endpoint import discover_recipe

        recipe = discover_recipe(str(settings.endpoint.value), api_key=os.environ.get("VLLM_API_KEY"),
                                 directory=settings.reports_dir / "private" / "discovered")
        settings = dataclasses.replace(settings, recipe=Setting(recipe.name, "discovery from the endpoint"))
    else:
        recipe = resolve_recipe(str(settings.recipe.value), settings.recipes_dir)
    return settings, with_overrides(recipe, settings.overrides)


def gate_junit_properties(record: GateRecord, sanitizer: Sanitizer) -> list[tuple[str, object]]:
    """A gate's junit ``<property>`` rows (family, title, scalar measurements, summary, whose failure
    it was), scrubbed."""
    prefix = f"vllmqual.{record.gate}"
    properties: list[tuple[str, object]] = [
        (f"{prefix}.family", family_of(record.gate, record.markers) or "other"),
        (f"{prefix}.title", sanitizer.scrub(record.title or record.gate)),
    ]
    for key, value in record.measurements.items():
        if isinstance(value, (int, float, str, bool)) or value is None:
            properties.append((f"{prefix}.{key}", sanitizer.scrub_obj(value)))
    if record.summary:
        properties.append((f"{prefix}.summary", sanitizer.scrub(record.summary)))
    if record.failure_kind:
        properties.append((f"{prefix}.failure_kind", str(record.failure_kind)))
    return properties


class QualRun(abc.ABC):
    """The session's recipes and arms, and the server questions every test may ask; the
    controller and the xdist worker answer the latter each in their own way."""

    def __init__(self, settings: Settings, default_recipe: Recipe, *, progress: ProgressFn,
                 invocation_args: list[str]) -> None:
        self.settings = settings
        self.default_recipe = default_recipe
        self.progress = progress
        self.invocation_args = invocation_args
        self.stamp = utc_stamp()
        self.arms: dict[str, Arm] = {}
        self._recipes: dict[str, Recipe] = {default_recipe.name: default_recipe}
        #: The planned arms, in the order they run (A/B, bracketed replay, campaign); empty on a worker.
        self.plan: list[ArmSpec] = []

    # -- recipes and arms ---------------------------------------------------------------

    def recipe(self, name: str) -> Recipe:
        """A recipe by name, loaded once (RecipeError on bad input)."""
        if name not in self._recipes:
            self._recipes[name] = with_overrides(resolve_recipe(name, self.settings.recipes_dir),
                                                 self.settings.overrides)
        return self._recipes[name]

    def arm(self, key: str) -> Arm:
        """Arm ``key``, created on first use (a planned arm's recipe and role, else the recipe named ``key``)."""
        if key not in self.arms:
            spec = next((s for s in self.plan if s.key == key), None)
            recipe = self.recipe(spec.recipe if spec else key)
            run_id = f"{key}-{self.stamp}-{os.getpid()}"
            self.arms[key] = Arm(
                key=key, recipe=recipe, role=spec.role if spec else "single", run_id=run_id,
                private_dir=self.settings.reports_dir / "private" / run_id,
                started_utc=utc_now(),
            )
        return self.arms[key]

    def mark_interrupted(self) -> None:
        """The session stops before every gate ran (Ctrl-C, SIGTERM, -x): every arm's report says so."""
        for arm in self.arms.values():
            arm.interrupted = True

    # -- what the run says about itself ----------------------------------------------------

    def reproduce_line(self, recipe_name: str) -> str:
        recipe = self._recipes.get(recipe_name)
        if recipe is None or recipe.discovered:
            return reproduce_line(self.invocation_args, recipe_name, discovered=recipe is not None,
                                  run_dir=self.settings.invocation_dir)
        return reproduce_line(self.invocation_args, self._recipe_reference(recipe), discovered=False,
                              run_dir=self.settings.invocation_dir)

    def _recipe_reference(self, recipe: Recipe) -> str:
        """What ``--recipe=`` needs to find this recipe again: its name when the name finds the same
        file, else its path (a recipe passed as a file outside the recipes directory)."""
        try:
            if resolve_recipe_path(recipe.name, self.settings.recipes_dir) == recipe.path.resolve():
                return recipe.name
        except RecipeError:
            pass
        return local_path_shown(str(recipe.path.resolve()), self.settings.invocation_dir)

    def test_order(self, arm_keys: list[str]) -> SortKeyFn:
        """The sort key of a test (arm key, gate name or None): arms in plan order, each arm's
        tests together so its server starts once, cheapest gates first within an arm."""
        return order_of_tests([spec.key for spec in self.plan], self.default_recipe.name, arm_keys)

    def header_lines(self, recipe_source: str) -> list[str]:
        """What the terminal header says: the recipe, its identity and how to reproduce the run."""
        return header_lines(self.default_recipe, recipe_source=recipe_source, endpoint=self.settings.endpoint.value,
                            reproduce=self.reproduce_line(self.default_recipe.name))

    def public_text_sanitizer(self, sanitizer: Sanitizer) -> Sanitizer:
        """Teach ``sanitizer`` this session's secrets: every arm's recipe env values and the API
        keys of the servers started so far (junit and the terminal are scrubbed with it)."""
        for recipe in [self.default_recipe, *(arm.recipe for arm in self.arms.values())]:
            sanitizer.add_env_values(recipe.server_env())
            sanitizer.keep(recipe.name, recipe.identity.served_model_name, recipe.identity.checkpoint)
            sanitizer.add_endpoint(recipe.launcher.endpoint)
        sanitizer.add_endpoint(self.settings.endpoint.value)
        for key in self.api_keys():
            sanitizer.add_secret(key)
        return sanitizer

    # -- the server of an arm, as a test sees it -------------------------------------------

    @abc.abstractmethod
    def start_server(self, key: str) -> ServerHandle:
        """Arm ``key``'s ready server (LaunchError when it did not start)."""

    @abc.abstractmethod
    def finish_arm(self, key: str) -> None:
        """pytest is done with arm ``key``'s tests."""

    @abc.abstractmethod
    def server_facts(self, key: str) -> dict[str, Any]:
        """Engine facts, endpoint facts and the identity check of arm ``key``'s started server."""

    @abc.abstractmethod
    def guard(self, key: str) -> ServerGuard | None:
        """The liveness guard of arm ``key``'s server (None before it is ready)."""

    @abc.abstractmethod
    def private_dir(self, key: str) -> Path:
        """Where arm ``key``'s private artifacts go."""

    @abc.abstractmethod
    def api_keys(self) -> list[str]:
        """The API keys of this session's servers (the sanitizer removes them from every output)."""

    @abc.abstractmethod
    def campaign_skip_reason(self, key: str) -> str | None:
        """Why arm ``key`` must not run (None: it runs)."""
