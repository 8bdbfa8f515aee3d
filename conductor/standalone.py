"""`conductor proxy MODULE:FACTORY`: one plugin as an ordinary stdio proxy component.

Any conductor (this one or another implementation) can then run the plugin as
a subprocess speaking `_proxy/initialize` and `_proxy/successor`. It is the
same machinery as a chain file with that one in-process proxy and no agent
(proxy mode): the router answers the conductor in the dialect it uses, and
unwraps and wraps the successor envelope around the plugin's traffic, whose
payloads keep their bytes unless a hook changes them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .chain import Chain, ComponentSpec

__all__ = ["standalone_chain"]


def standalone_chain(spec: str, factory: Any, options: dict[str, Any], name: str) -> Chain:
    """The proxy-mode chain that runs plugin `spec` (made by `factory(**options)`)."""
    component = ComponentSpec(name, "proxy", plugin=spec, factory=factory, options=options)
    return Chain(Path(f"<conductor proxy {spec}>"), name, (component,), None)
