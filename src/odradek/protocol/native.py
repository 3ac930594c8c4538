"""Whether the compiled codec (``odradek.protocol._codec``) may be used here.

``ODRADEK_NO_NATIVE=1`` makes every user take the pure-Python twins instead (tests
prove each twin identical). ``columns`` picks its whole implementation with
`compiled_module`; ``records`` asks for single functions with `compiled_function`,
as ``columns`` and the twins (``_codec_py``) import ``records`` themselves.
"""

from __future__ import annotations

import os
from typing import Any

NO_NATIVE_ENV = "ODRADEK_NO_NATIVE"


def compiled_module() -> Any | None:
    """The compiled codec, or None (not built, or turned off by NO_NATIVE_ENV)."""
    if os.environ.get(NO_NATIVE_ENV, "") not in ("", "0"):
        return None
    try:
        from odradek.protocol import _codec  # type: ignore[attr-defined]
    except ImportError:
        return None
    return _codec


def compiled_function(name: str) -> Any | None:
    """One function of the compiled codec, or None (also for a build older than it)."""
    module = compiled_module()
    return getattr(module, name, None) if module is not None else None
