"""The package's data files (efa_image/data/*.yml), or a file given instead."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import yaml


def read_yaml(
    name: str, path: Path | str | None = None, error: type[Exception] = ValueError
) -> tuple[Any, str]:
    """The YAML in `path`, or in the packaged data/`name`, and where it was read (for
    messages). Text that is not YAML raises `error`: "<where>: not YAML: ..."."""
    if path is None:
        text = resources.files("efa_image").joinpath("data", name).read_text()
        where = f"efa_image/data/{name}"
    else:
        text, where = Path(path).read_text(), str(path)
    try:
        return yaml.safe_load(text), where
    except yaml.YAMLError as exc:
        raise error(f"{where}: not YAML: {exc}") from None
