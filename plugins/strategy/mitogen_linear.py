"""Strategy `mitogen_linear`: Ansible's linear strategy over Mitogen's connections.

Mitogen keeps one Python interpreter per target for the whole play and sends
each task to it, instead of one `docker exec` and a fresh interpreter (with its
module payload) per task. Here an unchanged converge of the openmpi scenario
took 24 s instead of 35 s, and its whole `molecule test` 140 CPU-seconds
instead of 194. Only the connections Mitogen knows by their short name are
taken over (`docker`, `local`, `ssh`): the molecule scenarios and the Docker
image builds name `docker`.

This file only makes the strategy loadable from the repository (the directory
is ansible.cfg's strategy_plugins, and molecule's ANSIBLE_STRATEGY_PLUGINS), so
the path does not depend on where the virtualenv's site-packages are. Mitogen
itself is pinned in pyproject.toml. EFA_IMAGE_ANSIBLE_STRATEGY=linear turns it
off for molecule and image builds. ansible-core 2.19 warns that strategy
plugins outside ansible.builtin are deprecated (no removal version is set);
should a later ansible-core drop them, linear is the way back.
"""

from __future__ import annotations

import ansible_mitogen.loaders
import ansible_mitogen.strategy

_Linear = ansible_mitogen.loaders.strategy_loader.get("linear", class_only=True)


class StrategyModule(ansible_mitogen.strategy.StrategyMixin, _Linear):
    pass
