"""The engine's ``image_data`` handling: what a vision-language SGLang server checks before it expands images.

The engine does not look at pixels or expand placeholders (it reports the prompt as sent); it checks that each item
is a base64 image data URL and that the prompt holds one placeholder token per image, which is what a client that
lets the server expand placeholders must get right, and records the list.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Sequence
from typing import Final

from strands_tito.testing.engine.protocol import ProtocolError, value_error

__all__ = ["DEFAULT_IMAGE_TOKEN", "check_image_data"]

#: The placeholder Qwen-VL and Qwen3.5 templates render once per image.
DEFAULT_IMAGE_TOKEN: Final = "<|image_pad|>"
_DATA_URL: Final = re.compile(r"data:image/[A-Za-z0-9.+-]+;base64,(.+)", re.DOTALL)


def check_image_data(
    images: Sequence[str], prompt: Sequence[int], *, supported: bool, token_id: int | None
) -> ProtocolError | None:
    """Why the engine refuses these images for this prompt, or None."""
    if not supported:
        return value_error("image_data was given but the served model has no image understanding")
    for i, url in enumerate(images):
        match = _DATA_URL.fullmatch(url)
        if match is None:
            return value_error(f"image_data[{i}] is not a base64 image data URL (the engine fetches nothing)")
        try:
            base64.b64decode(match.group(1), validate=True)
        except binascii.Error:
            return value_error(f"image_data[{i}] has invalid base64")
    placeholders = sum(1 for token in prompt if token == token_id)
    if placeholders != len(images):
        return value_error(
            f"the prompt holds {placeholders} image placeholder tokens for {len(images)} images in image_data"
        )
    return None
