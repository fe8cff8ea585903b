"""Verified images found by fingerprint in a registry: the unchanged build on any machine.

`efa-image push` (and `build --push`) sends a verified image under its build
tags and `fingerprint-FINGERPRINT`, then, last, a record: an OCI artifact
tagged `fingerprint-FINGERPRINT.verified` naming the image ID, the manifest
digest it was pushed as, its labels and tags. Only push writes records, and
push takes only images that passed verification here, so a record stands for a
verified image.

`efa-image build --reuse-from REPOSITORY` (implied by `--push`) asks for the
record of its fingerprint before anything is fetched or built; with one, it
pulls the image by the recorded digest, checks the pulled image's ID and labels
against the record, records it as verified locally and tags it: no `packer
build`. A registry that cannot be reached or refuses, a record that does not
match, or a pulled image that is not the recorded one, is a miss said in one
line; the build goes on as if there were no registry.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from efa_image.building import fingerprint, images
from efa_image.registry.client import RegistryError, for_repository
from efa_image.registry.reference import Repository
from efa_image.runner import CommandError, last_line, run_command

FORMAT = 1
CONFIG_TYPE = "application/vnd.efa-image.verified-image.config.v1+json"
RECORD_TYPE = "application/vnd.efa-image.verified-image.v1+json"


@dataclass(frozen=True)
class Record:
    fingerprint: str
    image: str
    manifest: str
    labels: dict[str, str]
    tags: list[str]

    def document(self, repository: Repository) -> dict[str, object]:
        return {
            "format": FORMAT,
            "fingerprint": self.fingerprint,
            "image": self.image,
            "manifest": self.manifest,
            "labels": self.labels,
            "tags": self.tags,
            "repository": repository.ref,
            "published": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }


def image_tag(digest: str) -> str:
    return f"fingerprint-{digest}"


def record_tag(digest: str) -> str:
    return f"fingerprint-{digest}.verified"


def publish(repository: Repository, record: Record) -> str:
    """The record, after its image: REPOSITORY:TAG@DIGEST of the record's manifest."""
    body = json.dumps(record.document(repository), indent=1, sort_keys=True).encode()
    config = json.dumps({"format": FORMAT, "fingerprint": record.fingerprint}).encode()
    tag = record_tag(record.fingerprint)
    digest = for_repository(repository).push_artifact(tag, CONFIG_TYPE, config, RECORD_TYPE, body)
    return f"{repository.ref}:{tag}@{digest}"


def find(repository: Repository, digest: str) -> Record | None:
    """The record of a fingerprint in the repository; None when there is none."""
    registry = for_repository(repository)
    found = registry.artifact(record_tag(digest), CONFIG_TYPE, "record")
    if found is None:
        return None
    data = json.loads(registry.fetch_blob_bytes(found[1]))
    record = Record(
        str(data.get("fingerprint")),
        str(data.get("image")),
        str(data.get("manifest")),
        dict(data.get("labels") or {}),
        list(data.get("tags") or []),
    )
    if record.fingerprint != digest or not record.manifest.startswith("sha256:"):
        raise RegistryError(f"the record {record_tag(digest)[:28]}... names another build")
    return record


def pull(repository: Repository, record: Record) -> str:
    """The recorded image, pulled by digest and checked; a mismatch leaves nothing behind."""
    reference = f"{repository.ref}@{record.manifest}"
    try:
        run_command(["docker", "pull", reference], stream=True)
    except CommandError as exc:
        raise RegistryError(f"docker pull {reference} failed: {last_line(exc.output)}") from None
    image = images.image_id(reference)
    labels = images.labels(image)
    problems = []
    if image != record.image:
        problems.append(f"image ID {image[:19]}, the record says {record.image[:19]}")
    if labels != record.labels or labels.get(fingerprint.LABEL) != record.fingerprint:
        problems.append("its labels differ from the record's")
    if problems:
        run_command(["docker", "image", "rm", reference], check=False)
        raise RegistryError(f"{reference} is not the verified image: " + "; ".join(problems))
    return image
