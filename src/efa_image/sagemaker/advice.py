"""What the distribution checks say: advice on a config, or an error for input that cannot work.

Advice is a list, not an exception, because `efa-image distribution --check`
prints every problem of a config at once, each with its fix; DistributionError
is for what stops before any config exists (an unknown version, a flag that
contradicts the instance type).
"""

from __future__ import annotations

from dataclasses import dataclass

from efa_image.errors import EfaImageError


class DistributionError(EfaImageError, ValueError):
    """Bad input (a version, library or config that cannot work): the message says the fix."""


@dataclass(frozen=True)
class Advice:
    """One line of `--check` on a distribution config: an error stops the job or the SDK,
    a warning does not."""

    level: str  # "error" | "warning"
    message: str

    def render(self) -> str:
        return f"{self.level}: {self.message}"
