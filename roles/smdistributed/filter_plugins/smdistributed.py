"""Filter `smdistributed_plan`: the role's choice of smdistributed builds.

    {{ probe | smdistributed_plan({'dataparallel': artifact_info['smdistributed_dataparallel']},
                                  allow_unpinned) }}

returns {ok, message, image, builds}: per wanted library the build of
efa_image/data/smdistributed_builds.yml that the lock entry pins, or in
`message` every refusal (no build for this PyTorch/CUDA/Python, a lock entry
for another one, an unpinned wheel, no PyTorch at all). The rules are
efa_image.compat.smdistributed's, the same code `efa-image build`'s pre-flight runs;
the role turns a refusal into a failed assert, before it changes anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError


def smdistributed_plan(
    probe: Mapping[str, Any], pins: Mapping[str, Mapping[str, Any]], allow_unpinned: bool = False
) -> dict[str, Any]:
    try:
        from efa_image.compat import smdistributed
    except ImportError as exc:
        raise AnsibleFilterError(
            "smdistributed_plan needs the efa_image package in Ansible's Python: "
            "run ansible from the project's virtualenv (make setup)"
        ) from exc
    try:
        return smdistributed.plan(probe, pins, bool(allow_unpinned))
    except smdistributed.BuildsError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"smdistributed_plan": smdistributed_plan}
