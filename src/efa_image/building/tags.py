"""The tags of a verified image: what `efa-image build` tags and `efa-image push` pushes.

Both derive them the same way, the build from its plan, the push from the
built image's component labels, so that a pushed image carries the tags its
build gave it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping


def component_tags(flavor: str, profile: str, versions: Mapping[str, str]) -> list[str]:
    """`efa-portable` and one naming every component version, docker-tag safe."""
    parts = [f"{name.replace('_', '')}{version}" for name, version in sorted(versions.items())]
    detailed = re.sub(r"[^A-Za-z0-9_.-]", "-", "-".join([flavor, profile, *parts]))
    return [f"{flavor}-{profile}", detailed[:128]]
