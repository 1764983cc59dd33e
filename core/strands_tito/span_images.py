"""A turn's images on its span: one ``bytes`` attribute, ``tito.images`` (see ``docs/span-schema.md``).

Layout: a 4-byte little-endian length ``n``, then ``n`` bytes of UTF-8 JSON (the manifest), then the raw bytes of the
carried images, concatenated in prompt order. The manifest is
``{"token_id": <placeholder id or null>, "images": [{"mime", "sha256", "size", "omitted"}, ...]}``. One attribute,
not five, so a turn span stays within the attribute budget the start-up check reserves; ``bytes``, because the SDK's
length limits only ever cut strings.

An image over the per-image limit (``STRANDS_TITO_MAX_IMAGE_BYTES``, default :data:`DEFAULT_MAX_IMAGE_BYTES`) is
*omitted*: its MIME type, size and SHA-256 are carried, its bytes are not, and the assembled trajectory is marked
incomplete at that turn (a trainer cannot rebuild its vision input). Decoding checks every carried image against its
SHA-256, so ingest rejects corrupt or truncated images.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from strands_tito.errors import StrandsTitoError

__all__ = [
    "DEFAULT_MAX_IMAGE_BYTES",
    "SpanImage",
    "decode_images",
    "encode_images",
]

#: Default per-image limit: well under the 4 MiB a gRPC receiver accepts by default, with room for the turn's tokens.
DEFAULT_MAX_IMAGE_BYTES: Final = 3 * 1024 * 1024
_DATA_URL: Final = re.compile(r"data:(image/[A-Za-z0-9.+-]+);base64,(.*)", re.DOTALL)
_MIME: Final = re.compile(r"image/[A-Za-z0-9.+-]+")
_SHA256: Final = re.compile(r"[0-9a-f]{64}")


class ImageSchemaError(StrandsTitoError, ValueError):
    """``tito.images`` is malformed (spans.py re-raises it as a ``SpanSchemaError``)."""


@dataclass(frozen=True)
class SpanImage:
    """One image of a turn as carried on its span; ``data`` is None when it was omitted (over the size limit)."""

    mime: str
    sha256: str
    size: int
    data: bytes | None

    def data_url(self) -> str | None:
        """The image as a base64 data URL, or None when its bytes were not carried."""
        if self.data is None:
            return None
        return f"data:{self.mime};base64,{base64.b64encode(self.data).decode('ascii')}"


def encode_images(data_urls: Sequence[str], token_id: int | None, limit: int) -> tuple[bytes, list[int]]:
    """The ``tito.images`` value for a turn's images, and the indices of those omitted for exceeding ``limit``."""
    manifest: list[dict[str, Any]] = []
    blobs: list[bytes] = []
    omitted: list[int] = []
    for i, url in enumerate(data_urls):
        match = _DATA_URL.fullmatch(url)
        if match is None:
            raise ValueError(f"image {i} is not a base64 image data URL")
        data = base64.b64decode(match.group(2))
        entry = {"mime": match.group(1), "sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
        entry["omitted"] = len(data) > limit
        if entry["omitted"]:
            omitted.append(i)
        else:
            blobs.append(data)
        manifest.append(entry)
    head = json.dumps({"token_id": token_id, "images": manifest}, separators=(",", ":")).encode()
    return struct.pack("<I", len(head)) + head + b"".join(blobs), omitted


def decode_images(value: Any) -> tuple[list[SpanImage], int | None]:
    """Validate a ``tito.images`` value: the images in order and the placeholder token id.

    Raises:
        ImageSchemaError: not bytes, a bad manifest, sizes that do not add up, or an image whose SHA-256 differs.
    """
    if not isinstance(value, bytes) or len(value) < 4:
        raise ImageSchemaError("tito.images must be bytes holding a manifest length")
    (length,) = struct.unpack_from("<I", value)
    if 4 + length > len(value):
        raise ImageSchemaError(f"tito.images manifest of {length} bytes runs past the value")
    try:
        manifest = json.loads(value[4 : 4 + length])
    except (ValueError, UnicodeDecodeError) as e:
        raise ImageSchemaError("tito.images manifest is not JSON") from e
    entries = manifest.get("images") if isinstance(manifest, dict) else None
    token_id = manifest.get("token_id") if isinstance(manifest, dict) else None
    if not isinstance(entries, list) or not (token_id is None or (type(token_id) is int and token_id >= 0)):
        raise ImageSchemaError("tito.images manifest needs an images list and a token_id (int or null)")
    images: list[SpanImage] = []
    offset = 4 + length
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise ImageSchemaError(f"tito.images[{i}] is not an object")
        mime, sha, size, omitted = entry.get("mime"), entry.get("sha256"), entry.get("size"), entry.get("omitted")
        if not (isinstance(mime, str) and _MIME.fullmatch(mime) and isinstance(sha, str) and _SHA256.fullmatch(sha)):
            raise ImageSchemaError(f"tito.images[{i}] needs an image/* mime and a hex sha256")
        if type(size) is not int or size <= 0 or type(omitted) is not bool:
            raise ImageSchemaError(f"tito.images[{i}] needs a positive size and an omitted flag")
        data = None
        if not omitted:
            data = value[offset : offset + size]
            offset += size
            if len(data) != size or hashlib.sha256(data).hexdigest() != sha:
                raise ImageSchemaError(f"tito.images[{i}]: bytes do not match its size and sha256")
        images.append(SpanImage(mime, sha, size, data))
    if offset != len(value):
        raise ImageSchemaError(f"tito.images has {len(value) - offset} bytes no image accounts for")
    return images, token_id
