"""Credentials written inside URLs (``HF_ENDPOINT=https://user:token@mirror``), blanked
wherever ftui records or shows an environment value: launch.json, the hub messages of the
form, a run's hints and train.log.

Redaction by a variable's name (``HF_TOKEN``) misses these: the name is harmless, the value
carries the secret in its userinfo part. Only that part is replaced, so the record still
says which mirror was used (``https://***@mirror``).
"""

from __future__ import annotations

import re

# scheme://userinfo@ : the userinfo is everything up to the last "@" before the host's end
# ("/", "?", "#" or a space), as urllib.parse.urlsplit reads it; a password may hold "@"
# or ":" and is blanked whole. Hand-written because urlsplit takes one URL, and an
# environment value may hold several (a list of mirrors) or a URL inside other text.
USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^/?#\s]*)@")


def redact_urls(text: str) -> str:
    """``text`` with the userinfo of every URL in it replaced by ``***``."""
    return USERINFO.sub(lambda m: m.group("scheme") + "***@", text)
