#!/usr/bin/env python3
"""Writes tests/image/fixtures: small images encoded by independent encoders (Pillow, and a few lines of zlib for
the PNG layouts Pillow cannot write), each with the RGB that Pillow decodes from it, and a hostile corpus.

Run with Debian's python3-pil (a test package, scripts/setup.sh) from the repository root:
    /usr/bin/python3 tests/image/make_image_fixtures.py
The expected pixels are Pillow's, through convert("RGB") (alpha and a palette's transparency dropped): what the
Qwen3.5 processor resizes (transformers 5.17, measured by tools/make_vision_fixtures.py's rgb_rule). They
are written as binary PPM (P6) by Pillow. Nothing here is produced by duet's code.
"""
import base64
import io
import os
import re
import struct
import zlib

import numpy as np
from PIL import Image, ImageOps, PngImagePlugin

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
HOSTILE = os.path.join(HERE, "hostile")


def pattern(height, width, seed):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    img = np.stack([255 * x / max(1, width - 1), 255 * y / max(1, height - 1),
                    127.5 + 127.5 * np.sin(x / 3.0 + y / 5.0)], axis=-1)
    img += ((((x // 5) + (y // 3)) % 2) * 50 - 25)[..., None] + rng.normal(0, 10, (height, width, 3))
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def convert_to_rgb(image):
    return image if image.mode == "RGB" else image.convert("RGB")


def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png_bytes(width, height, bit_depth, color_type, raw_rows, interlaced=False, extra=b""):
    """A PNG from already-serialised scanlines (filter byte 0 added here); Adam7 when interlaced."""
    ihdr = struct.pack(">IIBBBBB", width, height, bit_depth, color_type, 0, 0, 1 if interlaced else 0)
    data = b"".join(b"\x00" + row for row in raw_rows)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + extra + chunk(b"IDAT", zlib.compress(data)) + chunk(b"IEND", b"")


def adam7_rows(pixels, bytes_per_pixel):
    """pixels: [H, W, bytes_per_pixel] u8 -> the scanlines of the seven Adam7 passes, in order."""
    rows = []
    for x0, y0, dx, dy in ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
                           (0, 1, 1, 2)):
        sub = pixels[y0::dy, x0::dx]
        if sub.shape[0] and sub.shape[1]:
            rows += [sub[r].tobytes() for r in range(sub.shape[0])]
    return rows


def save(name, data, exif_transpose=False, turn=None):
    """The file and Pillow's RGB of it; exif_transpose: turned first, as transformers' load_image turns it; turn: a
    function that turns the opened image instead (xmp_transpose)."""
    path = os.path.join(HERE, name)
    with open(path, "wb") as f:
        f.write(data)
    expected = Image.open(path)
    if exif_transpose:
        expected = ImageOps.exif_transpose(expected)
    if turn:
        expected = turn(expected)
    expected = convert_to_rgb(expected)
    expected.save(os.path.join(HERE, name + ".ppm"))
    return data


# XMP orientation (exif_orientation.h): Pillow's Image.getexif falls back, when the EXIF has no Orientation, to the
# first tiff:Orientation of the XMP packet, attribute or element form (this pattern). Debian's Pillow 9.4 looks in
# info["XML:com.adobe.xmp"] only, which PNG text chunks set; Pillow 11 and later also in info["xmp"], which a JPEG's
# APP1 XMP segment and a WebP's XMP chunk set.
XMP_ORIENTATION = re.compile(rb'tiff:Orientation(="|>)([0-9])')
TRANSPOSE = {2: Image.Transpose.FLIP_LEFT_RIGHT, 3: Image.Transpose.ROTATE_180, 4: Image.Transpose.FLIP_TOP_BOTTOM,
             5: Image.Transpose.TRANSPOSE, 6: Image.Transpose.ROTATE_270, 7: Image.Transpose.TRANSVERSE,
             8: Image.Transpose.ROTATE_90}
XMP_APP1 = b"http://ns.adobe.com/xap/1.0/\x00"


def xmp_packet(orientation, element=False):
    """An XMP packet as Adobe's tools and exiftool write it, with tiff:Orientation as an attribute or an element."""
    attribute = "" if element else f' tiff:Orientation="{orientation}"'
    inside = f"<tiff:Orientation>{orientation}</tiff:Orientation>" if element else ""
    return ('<?xpacket begin="\ufeff" id="W5M0MpCehiHzreSzNTczkc9d"?><x:xmpmeta xmlns:x="adobe:ns:meta/">'
            '<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"><rdf:Description rdf:about="" '
            f'xmlns:tiff="http://ns.adobe.com/tiff/1.0/"{attribute}>{inside}</rdf:Description></rdf:RDF>'
            '</x:xmpmeta><?xpacket end="w"?>')


def xmp_transpose(image):
    """Pillow 11's exif_transpose of a JPEG or WebP whose EXIF has no Orientation, with Debian's Pillow 9.4: the same
    pattern over the packet Pillow 11 keeps in info["xmp"] (the last APP1 XMP segment of a JPEG, the XMP chunk of a
    WebP), which Pillow 9.4 also reads (applist, info["xmp"]); then Pillow's own transpose."""
    assert 0x0112 not in image.getexif()
    if image.format == "JPEG":
        packets = [c.split(b"\x00", 1)[1] for m, c in image.applist if m == "APP1" and c.startswith(XMP_APP1)]
        packet = packets[-1] if packets else b""
    else:
        packet = image.info.get("xmp", b"")
    match = XMP_ORIENTATION.search(packet)
    method = TRANSPOSE.get(int(match[2])) if match else None
    return image.transpose(method) if method else image


def jpeg_xmp(data, packet):
    """A JPEG with an APP1 XMP segment (its namespace, NUL, the packet) right after SOI."""
    segment = XMP_APP1 + packet.encode()
    return data[:2] + b"\xff\xe1" + struct.pack(">H", 2 + len(segment)) + segment + data[2:]


def png_text(data, kind, keyword, text, before_iend=False):
    """A PNG with one more text chunk (tEXt, or iTXt uncompressed), after IHDR or just before IEND."""
    body = keyword + b"\x00" + (text if kind == b"tEXt" else b"\x00\x00\x00\x00" + text)
    at = data.rfind(b"IEND") - 4 if before_iend else 8 + 25
    return data[:at] + chunk(kind, body) + data[at:]


def pil(array, fmt, mode=None, **kwargs):
    image = Image.fromarray(array)
    if mode:
        image = image.convert(mode)
    out = io.BytesIO()
    image.save(out, format=fmt, **kwargs)
    return out.getvalue()


def main():
    os.makedirs(HOSTILE, exist_ok=True)
    a = pattern(23, 37, 1)
    save("rgb8.png", pil(a, "PNG"))
    alpha = (np.arange(23 * 37).reshape(23, 37) * 7 % 256).astype(np.uint8)
    alpha[0, :5] = 0
    alpha[1, :5] = 255
    save("rgba8.png", pil(np.dstack([a, alpha]), "PNG"))
    save("gray8.png", pil(a, "PNG", mode="L"))
    # Every (colour, alpha) pair: 86 columns x 3 channels cover the 256 colour values, 256 rows the alphas; the colours
    # shift by one a row, so that the colour kept under each alpha differs from row to row (the bottom-up control).
    values = (np.arange(86 * 3).reshape(1, 86, 3) + np.arange(256).reshape(256, 1, 1)) % 256
    every = np.dstack([values, np.arange(256)[:, None].repeat(86, 1)])
    save("alpha_every_pair.png", pil(every.astype(np.uint8), "PNG"))
    save("gray_alpha.png", _la_png(a[..., 0], alpha))
    palette_image = Image.fromarray(a).convert("P", palette=Image.ADAPTIVE, colors=16)
    out = io.BytesIO()
    palette_image.save(out, format="PNG", transparency=3)
    save("palette_trns.png", out.getvalue())
    wide16 = (a.astype(np.uint16) * 257 + np.uint16(13)).astype(">u2")  # the low byte must be dropped
    save("rgb16.png", png_bytes(37, 23, 16, 2, [wide16[r].tobytes() for r in range(23)]))
    save("rgb8_adam7.png", png_bytes(37, 23, 8, 2, adam7_rows(a, 3), interlaced=True))
    save("rgb8_gamma.png", png_bytes(37, 23, 8, 2, [a[r].tobytes() for r in range(23)],
                                     extra=chunk(b"gAMA", struct.pack(">I", 100000))))  # ignored, as Pillow does
    b = pattern(41, 29, 2)
    save("q95_444.jpg", pil(b, "JPEG", quality=95, subsampling=0))
    save("q80_420.jpg", pil(b, "JPEG", quality=80, subsampling=2))
    save("gray.jpg", pil(b, "JPEG", mode="L", quality=90))
    save("progressive.jpg", pil(b, "JPEG", quality=85, progressive=True))
    save("lossy.webp", pil(b, "WEBP", quality=75))
    save("lossless_alpha.webp", pil(np.dstack([b, (b[..., 0] // 2 + 60)]), "WEBP", lossless=True))
    # EXIF orientation outside JPEG (exif_orientation.h): Pillow 9.4 writes a bare TIFF block ("MM") in a PNG's eXIf
    # chunk before IDAT, and in a WebP's EXIF chunk after the image data in the extended layout (VP8X, EXIF flag).
    for orientation in (3, 6):
        exif = Image.Exif()
        exif[0x0112] = orientation
        save(f"exif{orientation}.png", pil(a, "PNG", exif=exif), exif_transpose=True)
    for orientation in (6, 7):
        exif = Image.Exif()
        exif[0x0112] = orientation
        save(f"exif{orientation}.webp", pil(b, "WEBP", quality=75, exif=exif), exif_transpose=True)
    # XMP orientation, where the EXIF has none: PNG iTXt (attribute form; element form compressed), a tEXt chunk after
    # IDAT (read once the pixels are), EXIF's Orientation 1 beside XMP's 6 (EXIF's tag wins: not turned); JPEG APP1
    # (element form) and EXIF's 3 beside XMP's 6; a WebP XMP chunk (Pillow writes VP8X with the XMP flag).
    info = PngImagePlugin.PngInfo()
    info.add_itxt("XML:com.adobe.xmp", xmp_packet(6))
    save("xmp6.png", pil(a, "PNG", pnginfo=info), exif_transpose=True)
    info = PngImagePlugin.PngInfo()
    info.add_itxt("XML:com.adobe.xmp", xmp_packet(8, element=True), zip=True)
    save("xmp8_zip.png", pil(a, "PNG", pnginfo=info), exif_transpose=True)
    save("xmp3_late.png", png_text(pil(a, "PNG"), b"tEXt", b"XML:com.adobe.xmp", xmp_packet(3).encode(), True),
         exif_transpose=True)
    info = PngImagePlugin.PngInfo()
    info.add_itxt("XML:com.adobe.xmp", xmp_packet(6))
    exif = Image.Exif()
    exif[0x0112] = 1
    save("exif1_xmp6.png", pil(a, "PNG", pnginfo=info, exif=exif), exif_transpose=True)
    save("xmp5.jpg", jpeg_xmp(pil(b, "JPEG", quality=90), xmp_packet(5, element=True)), turn=xmp_transpose)
    exif = Image.Exif()
    exif[0x0112] = 3
    save("exif3_xmp6.jpg", jpeg_xmp(pil(b, "JPEG", quality=90, exif=exif), xmp_packet(6)), exif_transpose=True)
    save("xmp7.webp", pil(b, "WEBP", quality=75, xmp=xmp_packet(7).encode()), turn=xmp_transpose)
    c = pattern(30, 20, 3)
    save("interlaced.gif", pil(c, "GIF", mode="P", interlace=True))
    save("plain.gif", pil(c, "GIF", mode="P", interlace=False))
    frames = [Image.fromarray(c).convert("P"), Image.fromarray(pattern(30, 20, 4)).convert("P")]
    out = io.BytesIO()
    frames[0].save(out, format="GIF", save_all=True, append_images=frames[1:], duration=100, loop=0,
                   interlace=False)
    save("animated.gif", out.getvalue())  # the first frame
    transparent = Image.fromarray(c).convert("P", palette=Image.ADAPTIVE, colors=32)
    out = io.BytesIO()
    transparent.save(out, format="GIF", transparency=5, interlace=False)
    save("transparent.gif", out.getvalue())

    # A first frame smaller than the logical screen (3 x 2 at (1, 0) on 6 x 4, background index 2), without and
    # with a transparent index: Pillow fills the rest with the transparent index, else with index 0.
    frame = Image.new("P", (3, 2), 1)
    frame.putpalette([255, 0, 0, 0, 255, 0, 0, 0, 255, 10, 20, 30] + [7] * (252 * 3))
    for name, extra in (("partial_frame.gif", {}), ("partial_frame_transparent.gif", {"transparency": 3})):
        out = io.BytesIO()
        frame.save(out, format="GIF", optimize=False, **extra)
        data = bytearray(out.getvalue())
        data[6:10] = struct.pack("<HH", 6, 4)
        data[11] = 2
        at = data.find(b"\x2c")
        data[at + 1:at + 5] = struct.pack("<HH", 1, 0)
        save(name, bytes(data))

    # Pillow's resize(BICUBIC) of a larger RGB image, down, up, one side only and to 1 x 1: the resize test's
    # reference within 1 (torch's uint8 resize, which the processor uses, rounds its weights differently).
    photo = pattern(120, 160, 9)
    save("photo.png", pil(photo, "PNG"))
    for width, height in ((64, 48), (320, 224), (160, 60), (97, 120), (13, 200), (1, 1)):
        Image.fromarray(photo).resize((width, height), Image.BICUBIC).save(
            os.path.join(HERE, f"photo.png.bicubic_{width}x{height}.ppm"))

    # A data: URL payload made by Python's own base64 (the test's independent reference for duet's decoder).
    with open(os.path.join(HERE, "rgb8.png"), "rb") as f, open(os.path.join(HERE, "rgb8.png.b64"), "w") as out:
        out.write(base64.b64encode(f.read()).decode())

    # The hostile corpus: headers that declare too much, nonsense, truncations are made by the test from the above.
    def hostile(name, data):
        with open(os.path.join(HOSTILE, name), "wb") as f:
            f.write(data)

    few_rows = zlib.compress(b"\x00" * 64)
    ihdr = lambda w, h, depth=8, kind=0: chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, kind, 0, 0, 0))
    sig = b"\x89PNG\r\n\x1a\n"
    hostile("bomb_100000x100000.png", sig + ihdr(100000, 100000) + chunk(b"IDAT", few_rows) + chunk(b"IEND", b""))
    hostile("tall_1x100000.png", sig + ihdr(1, 100000) + chunk(b"IDAT", few_rows) + chunk(b"IEND", b""))
    hostile("zero_width.png", sig + ihdr(0, 10) + chunk(b"IDAT", few_rows) + chunk(b"IEND", b""))
    hostile("garbage_after_ihdr.png", sig + ihdr(16, 16, 8, 2) + bytes(range(256)) * 4)
    hostile("bad_ihdr_crc.png", sig + ihdr(16, 16)[:-1] + b"\x00" + chunk(b"IEND", b""))
    hostile("no_idat.png", sig + ihdr(16, 16) + chunk(b"IEND", b""))
    # A JPEG whose SOF declares 65500 x 65500 (the rest of a real file's headers kept).
    j = bytearray(pil(pattern(8, 8, 5), "JPEG", quality=90))
    sof = j.find(b"\xff\xc0")
    j[sof + 5:sof + 9] = struct.pack(">HH", 65500, 65500)
    hostile("bomb_65500x65500.jpg", bytes(j))
    hostile("garbage_after_soi.jpg", b"\xff\xd8\xff\xe0" + bytes((i * 37) % 251 for i in range(600)))
    # A GIF whose logical screen is 65535 x 65535 with a 1 x 1 frame.
    g = bytearray(pil(pattern(1, 1, 6), "GIF", mode="P"))
    g[6:10] = struct.pack("<HH", 65535, 65535)
    hostile("screen_65535x65535.gif", bytes(g))
    w = bytearray(pil(pattern(8, 8, 7), "WEBP", lossless=True))
    hostile("riff_only.webp", bytes(w[:16]) + b"\x00" * 20)
    hostile("text.txt", b"hello, this is not an image\n")
    hostile("bmp.bmp", pil(pattern(4, 4, 8), "BMP"))
    hostile("empty.bin", b"")
    print("wrote", len(os.listdir(HERE)) - 1, "fixtures and", len(os.listdir(HOSTILE)), "hostile files to", HERE)


def _la_png(gray, alpha):
    out = io.BytesIO()
    Image.merge("LA", [Image.fromarray(gray), Image.fromarray(alpha)]).save(out, format="PNG")
    return out.getvalue()


if __name__ == "__main__":
    main()
