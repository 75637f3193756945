"""What the 9B vision gate (tools/gpu_vision_gate.sh) sends, shared by its two sides: the transformers side
(vision_gate_9b.py, torch) and the HTTP client (vision_gate_serve.py, standard library). Deterministic: the same
images, texts and requests on every run. Needs numpy and Pillow only to write the images (write_images).

The images are PNG (lossless, so both sides decode the same pixels) of a pattern with gradients, edges and noise, at
sizes that take each branch of smart_resize (docs/vision.md 2.2): 224 x 224 is upscaled to 256 x 256, 1200 x 160 is
resized to a multiple of 32, 448 x 320 and 1024 x 1024 are kept, and aspect ratios from 1:7.5 to 1:1.
"""
import base64
import os
import random
import sys

SEED = 20261221
IMAGE_TOKEN, VISION_START, VISION_END = 248056, 248053, 248054

# name: (width, height)
IMAGES = {
    "i224": (224, 224),
    "i448x320": (448, 320),
    "i1024": (1024, 1024),
    "i300x500": (300, 500),
    "i1200x160": (1200, 160),
    "i768x1024": (768, 1024),
    "i1024b": (1024, 1024),  # the TTFT image: not the gate's, so nothing of the gate is reused
}

# The stock 9B processor (preprocessor_config.json, docs/vision.md 2).
PROCESSOR = {"do_convert_rgb": True, "do_normalize": True, "do_rescale": True, "do_resize": True,
             "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
             "image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen3VLProcessor",
             "merge_size": 2, "patch_size": 16, "temporal_patch_size": 2, "resample": 3, "rescale_factor": 1 / 255,
             "size": {"shortest_edge": 256 * 256, "longest_edge": 4096 * 4096}}

WORDS = ("the of and to in is that it was for on are as with his they at be this from have or by one had not but "
         "what all were when we there can an your which their said if do will each about how up out them then she "
         "many some so these would other into has more her two like him see time could no make than first been its "
         "who now people my made over did down only way find use may water long little very after words called just "
         "where most know get through back much before go good new write our used me man too any day same right look "
         "think also around another came come work three word must because does part even place well such here take "
         "why things help put years different away again off went old number great tell men say small every found "
         "still between name should home big give air line set own under read last never us left end along while "
         "might next sound below saw something thought both few those always looked show large often together asked "
         "house world going want school important until form food keep children feet land side without boy once "
         "animals life enough took sometimes four head above kind began almost live page got earth need far hand high "
         "year mother light parts country father let night following picture being study second eyes soon times story "
         "boys since white days ever paper hard near sentence better best across during today others however sure "
         "means knew try told young miles sun ways thing whole hear example heard several change answer room sea "
         "against top turned learn point city play toward five using himself usually").split()


def words(count, seed):
    """`count` words drawn from WORDS by a seeded generator, as one line of text."""
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(count))


def pattern(width, height, seed):
    """A deterministic RGB image (uint8 [height, width, 3]): gradients, a checker and noise, so that both resampling
    and the order of patches change the rows."""
    import numpy as np

    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    r = 255 * x / max(1, width - 1)
    g = 255 * y / max(1, height - 1)
    b = 127.5 + 127.5 * np.sin(x / 9.0 + y / 13.0)
    checker = (((x // 23) + (y // 17)) % 2) * 60 - 30
    image = np.stack([r + checker, g - checker, b], axis=-1) + rng.normal(0, 12, (height, width, 3))
    return np.clip(np.rint(image), 0, 255).astype(np.uint8)


def write_images(folder):
    """Every image of IMAGES as <folder>/<name>.png, and the mirrored control image of the exactness check; returns
    {name: path}. The same bytes every time, so files already there are kept."""
    os.makedirs(folder, exist_ok=True)
    paths = {}
    for i, (name, (width, height)) in enumerate(sorted(IMAGES.items())):
        paths[name] = os.path.join(folder, f"{name}.png")
        wanted = [(paths[name], False)]
        if name == "i448x320":  # the control of the exactness check: the same image mirrored
            paths[name + "_flipped"] = os.path.join(folder, f"{name}_flipped.png")
            wanted.append((paths[name + "_flipped"], True))
        if all(os.path.exists(path) for path, _ in wanted):
            continue
        from PIL import Image

        array = pattern(width, height, SEED + i)
        for path, mirrored in wanted:
            Image.fromarray(array[:, ::-1].copy() if mirrored else array).save(path, format="PNG", compress_level=1)
    return paths


def smart_resize(height, width, factor=32, min_pixels=256 * 256, max_pixels=4096 * 4096):
    """docs/vision.md 2.2 (the sizes the tower sees; tools/smart_resize.py)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from smart_resize import smart_resize as from_docs

    return from_docs(height, width, factor, min_pixels, max_pixels)


def image_tokens(name):
    width, height = IMAGES[name]
    h, w = smart_resize(height, width)
    return (h // 32) * (w // 32)


# ------------------------------------------------------------------------------------------------------ prompts
def _image(name):
    return {"type": "image", "image": name}


def _text(count, seed):
    return {"type": "text", "text": words(count, seed)}


def gate_cases():
    """The rows gate's prompts: one chat each, 1 or 2 images of different sizes among text. [{name, messages}]"""
    s = SEED
    return [
        {"name": "224_square", "messages": [
            {"role": "user", "content": [_text(40, s + 1), _image("i224"), _text(20, s + 2)]}]},
        {"name": "448x320_first", "messages": [
            {"role": "user", "content": [_image("i448x320"), _text(300, s + 3)]}]},
        {"name": "two_images", "messages": [
            {"role": "user", "content": [_text(60, s + 4), _image("i1024"), _text(80, s + 5), _image("i300x500"),
                                         _text(30, s + 6)]}]},
        {"name": "wide_1200x160", "messages": [
            {"role": "system", "content": words(100, s + 7)},
            {"role": "user", "content": [_text(50, s + 8), _image("i1200x160"), _text(400, s + 9)]}]},
        {"name": "768x1024_late", "messages": [
            {"role": "user", "content": [_text(800, s + 10), _image("i768x1024"), _text(20, s + 11)]}]},
    ]


def ttft_case():
    """Time to first token: one 1024 x 1024 image (1024 image tokens) and about 100 text tokens."""
    return {"name": "ttft_1024", "messages": [
        {"role": "user", "content": [_image("i1024b"), _text(90, SEED + 20)]}]}


def images_of(messages):
    """The image names of a conversation, in prompt order."""
    names = []
    for message in messages:
        if isinstance(message["content"], list):
            names += [part["image"] for part in message["content"] if part.get("type") == "image"]
    return names


def for_transformers(messages):
    """The conversation as transformers' chat template takes it: image parts as {"type": "image"} (the template writes
    <|vision_start|><|image_pad|><|vision_end|> for each)."""
    out = []
    for message in messages:
        content = message["content"]
        if isinstance(content, list):
            content = [{"type": "image"} if part.get("type") == "image" else dict(part) for part in content]
        out.append({"role": message["role"], "content": content})
    return out


def data_url(path):
    with open(path, "rb") as f:
        return "data:image/png;base64," + base64.b64encode(f.read()).decode()


def for_duet(messages, paths):
    """The conversation as an OpenAI chat request carries it: image parts as image_url data URLs of the PNG files."""
    out = []
    for message in messages:
        content = message["content"]
        if isinstance(content, list):
            content = [{"type": "image_url", "image_url": {"url": data_url(paths[part["image"]])}}
                       if part.get("type") == "image" else dict(part) for part in content]
        out.append({"role": message["role"], "content": content})
    return out


def expand_image_pads(text, counts, pad="<|image_pad|>"):
    """The processor's replace_image_token on the rendered text: the i-th <|image_pad|> becomes counts[i] of them."""
    pieces = text.split(pad)
    if len(pieces) - 1 != len(counts):
        raise ValueError(f"{len(pieces) - 1} image pads in the text for {len(counts)} images")
    out = pieces[0]
    for count, piece in zip(counts, pieces[1:]):
        out += pad * count + piece
    return out


def exactness_requests():
    """(b): 16 chat requests, 6 with images (one with two), greedy and seeded, 32 tokens each, logprobs and ids on, so
    that byte equality covers the tokens and their log-probabilities. Each is {"label", "body"}; bodies name images by
    their IMAGES name (for_duet turns them into data URLs)."""
    requests = []
    image_sets = {0: ["i448x320"], 3: ["i224"], 5: ["i1200x160"], 8: ["i300x500"], 11: ["i224", "i448x320"],
                  14: ["i768x1024"]}
    for k in range(16):
        content = [_text(20 + 37 * k % 400, SEED + 100 + k)]
        for name in image_sets.get(k, []):
            content = [_image(name)] + content
        body = {"messages": [{"role": "user", "content": content}], "max_tokens": 32, "ignore_eos": True,
                "logprobs": True, "top_logprobs": 2, "return_token_ids": True}
        if k % 2 == 0:
            body["temperature"] = 0
            sampling = "greedy"
        else:
            body.update(temperature=0.8, top_p=0.95, seed=1000 + k)
            sampling = "seeded"
        kind = f"{len(image_sets.get(k, []))} image(s)" if k in image_sets else "text"
        requests.append({"label": f"r{k:02d} {kind} {sampling}", "body": body})
    return requests


def exactness_controls(requests):
    """Planted controls, each of which must differ from the request it is made from: a seeded request with another
    seed, and a greedy image request with its image mirrored. [(label, index of the original, body)]"""
    seeded = next(i for i, r in enumerate(requests) if "seed" in r["body"])
    other_seed = dict(requests[seeded]["body"], seed=requests[seeded]["body"]["seed"] + 1)
    imaged = next(i for i, r in enumerate(requests) if r["body"].get("temperature") == 0
                  and images_of(r["body"]["messages"]) == ["i448x320"])
    flipped = dict(requests[imaged]["body"])
    flipped["messages"] = [{"role": m["role"], "content": [
        _image("i448x320_flipped") if isinstance(p, dict) and p.get("image") == "i448x320" else p
        for p in m["content"]]} for m in requests[imaged]["body"]["messages"]]
    return [("another seed", seeded, other_seed), ("the image mirrored", imaged, flipped)]
