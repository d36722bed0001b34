"""Cloud SDK messages without credentials in them, for anything that prints or logs one.

Query-signed APIs (Alibaba's RPC style, AWS's presigned URLs) put the key id and the signature in the
URL, and an SDK's connection error quotes that URL whole: ``...?AccessKeyId=LTAI...&Signature=...``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MASK = "***"
# The query parameters that carry a credential or a signature made with one.
_SIGNED = re.compile(
    r"\b(AccessKeyId|Signature|SecurityToken|SecretId|X-Amz-Credential|X-Amz-Signature|X-Amz-Security-Token)"
    r"=[^&\s'\"()<>]+",
    re.IGNORECASE,
)
_MIN_CHARS = 4  # shorter values would mask ordinary words


def without_credentials(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every signed-URL credential parameter and every one of ``secrets`` masked."""
    text = _SIGNED.sub(lambda m: f"{m.group(1)}={MASK}", text)
    for secret in sorted({s for s in secrets if len(s) >= _MIN_CHARS}, key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text
