"""The processor's smart resize (docs/vision.md 2.2), written from the docs: the size an image is resized to before it
is cut into patches, a multiple of `factor` (patch x merge) on each side within [min_pixels, max_pixels]. Shared by
tools/make_vision_fixtures.py (checked there against transformers' image processor) and tools/vision_gate_cases.py."""
import math


def smart_resize(height, width, factor, min_pixels, max_pixels):
    if max(height, width) / min(height, width) > 200:
        raise ValueError("aspect ratio over 200")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar
