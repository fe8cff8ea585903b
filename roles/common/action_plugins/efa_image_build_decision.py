"""Action `efa_image_build_decision`: whether a component must be built.

The decision itself is efa_image.building.install_record.

Reads the component's install record on the target (slurp, through whatever
connection the play uses), compares the recorded inputs with the wanted ones
and returns {build, reasons, record}: record is the text to write once the
build has passed its checks.
"""

from __future__ import annotations

import base64
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from efa_image.building import install_record


class ActionModule(ActionBase):
    _VALID_ARGS = frozenset(("component", "record_path", "inputs", "force"))

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        args = self._task.args
        component = str(args.get("component") or "")
        inputs = args.get("inputs")
        if not component or not isinstance(inputs, dict) or not args.get("record_path"):
            raise AnsibleActionFail(
                "efa_image_build_decision needs component, record_path and inputs (a mapping)"
            )
        read = self._execute_module(
            module_name="ansible.builtin.slurp",
            module_args={"src": str(args["record_path"])},
            task_vars=task_vars,
        )
        text = base64.b64decode(read["content"]).decode() if not read.get("failed") else None
        decision = install_record.decide(text, inputs, bool(args.get("force")))
        return result | {
            "changed": False,
            "build": decision.build,
            "reasons": decision.reasons,
            "msg": decision.render(component),
            "record": install_record.record(component, inputs),
        }
