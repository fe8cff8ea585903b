"""Flavours (roles in an image) and profiles (a method per role) from group_vars."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from efa_image.artifacts.lock import Artifact, Lock
from efa_image.errors import EfaImageError
from efa_image.paths import project_root

DEFAULT_BASE_IMAGE = "efa-image/base:debian13"


@dataclass(frozen=True)
class Catalog:
    flavors: dict[str, list[str]]
    profiles: dict[str, dict[str, str]]
    default_flavor: str
    default_profile: str
    # A profile's lock overlays, applied in order (flavors.yml: one path or a list).
    overlays: dict[str, tuple[Path, ...]] = field(default_factory=dict)
    base_images: dict[str, str] = field(default_factory=dict)
    descriptions: dict[str, str] = field(default_factory=dict)
    # Flavours the lock already serves but no playbook builds yet (sagemaker).
    planned: frozenset[str] = frozenset()
    # What a flavour's roles add to the image ENV beyond packer's own (their env.d
    # records, which the build checks against the image): variables, PATH entries.
    image_env: dict[str, dict[str, str]] = field(default_factory=dict)
    image_path: dict[str, list[str]] = field(default_factory=dict)
    # The lock entries a flavour's roles use in place of their defaults: role
    # variable (nccl_wheel_artifact, pytorch_wheelset) -> lock entry or wheel set.
    artifacts: dict[str, dict[str, str]] = field(default_factory=dict)
    # Each such variable's default (the role's defaults/main.yml): the entry it
    # names when a flavour does not choose another.
    defaults: dict[str, str] = field(default_factory=dict)

    def roles(self, flavor: str) -> list[str]:
        if flavor not in self.flavors:
            raise EfaImageError(f"unknown flavour {flavor!r}; known: {', '.join(self.flavors)}")
        return self.flavors[flavor]

    def buildable(self) -> list[str]:
        """The flavours a playbook builds, in the catalog's order."""
        return [name for name in self.flavors if name not in self.planned]

    def base_image(self, flavor: str) -> str:
        """The flavour's default base image (a CUDA one where roles compile against CUDA)."""
        self.roles(flavor)
        return self.base_images.get(flavor, DEFAULT_BASE_IMAGE)

    def methods(self, profile: str) -> dict[str, str]:
        if profile not in self.profiles:
            raise EfaImageError(f"unknown profile {profile!r}; known: {', '.join(self.profiles)}")
        return self.profiles[profile]

    def overlay(self, profile: str) -> tuple[Path, ...]:
        """The lock overlays the profile builds with, in order (none: empty)."""
        self.methods(profile)
        return self.overlays.get(profile, ())

    def unchosen(self, flavor: str) -> set[str]:
        """Lock entries (or wheel sets) that a role variable could name but does not in
        flavour: for each variable some flavour sets, every value it takes in any
        flavour and its default, less the one this flavour uses."""
        self.roles(flavor)
        mine = self.artifacts.get(flavor, {})
        left: set[str] = set()
        for variable in {v for chosen in self.artifacts.values() for v in chosen}:
            candidates = {
                chosen[variable] for chosen in self.artifacts.values() if variable in chosen
            }
            if variable in self.defaults:
                candidates.add(self.defaults[variable])
            left |= candidates - {mine.get(variable, self.defaults.get(variable))}
        return left

    def needed(self, lock: Lock, flavor: str, profile: str) -> list[Artifact]:
        """The artifacts a build of flavour with profile downloads: its roles' entries
        for their methods, less the alternatives the flavour does not choose."""
        roles, methods = self.roles(flavor), self.methods(profile)
        unchosen = self.unchosen(flavor)
        return [
            artifact
            for artifact in lock.artifacts.values()
            if artifact.role in roles
            and artifact.used_with(methods.get(artifact.role))
            and (artifact.wheelset or artifact.name) not in unchosen
        ]


def load_catalog(path: Path | None = None) -> Catalog:
    path = path or project_root() / "playbooks" / "group_vars" / "all" / "flavors.yml"
    playbooks = path.parents[2]
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    flavors, profiles = data["efa_image_flavors"], data["efa_image_profiles"]
    artifacts = {
        name: {str(k): str(v) for k, v in spec["artifacts"].items()}
        for name, spec in flavors.items()
        if spec.get("artifacts")
    }
    return Catalog(
        flavors={name: list(spec["roles"]) for name, spec in flavors.items()},
        profiles={name: dict(spec["methods"]) for name, spec in profiles.items()},
        default_flavor=data["efa_image_default_flavor"],
        default_profile=data["efa_image_default_profile"],
        base_images={
            name: spec["base_image"] for name, spec in flavors.items() if spec.get("base_image")
        },
        descriptions={
            name: " ".join(str(spec["description"]).split())
            for name, spec in flavors.items()
            if spec.get("description")
        },
        planned=frozenset(name for name in flavors if not (playbooks / f"{name}.yml").is_file()),
        image_env={
            name: {str(k): str(v) for k, v in spec["image_env"].items()}
            for name, spec in flavors.items()
            if spec.get("image_env")
        },
        image_path={
            name: [str(p) for p in spec["image_path"]]
            for name, spec in flavors.items()
            if spec.get("image_path")
        },
        artifacts=artifacts,
        defaults=role_defaults(playbooks.parent / "roles", artifacts),
        overlays={
            name: tuple(playbooks / p for p in _as_list(spec["lock_overlay"]))
            for name, spec in profiles.items()
            if spec.get("lock_overlay")
        },
    )


def role_defaults(roles: Path, artifacts: dict[str, dict[str, str]]) -> dict[str, str]:
    """The default of each role variable the flavours set, from roles/*/defaults/main.yml."""
    wanted = {variable for chosen in artifacts.values() for variable in chosen}
    found: dict[str, str] = {}
    for defaults in sorted(roles.glob("*/defaults/main.yml")) if wanted else []:
        values = yaml.safe_load(defaults.read_text()) or {}
        found.update({k: str(v) for k, v in values.items() if k in wanted})
    return found


def _as_list(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)
