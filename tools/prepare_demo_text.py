#!/usr/bin/env python3
"""Extracts plain English text for tools/train_demo.py from Debian's python3.11-doc package.

    apt-get install -y python3.11-doc
    python3 tools/prepare_demo_text.py [--src /usr/share/doc/python3.11/html/_sources] [--out .carry/demo-text]

Why that package: it ships the reStructuredText sources of the Python 3.11 documentation (tutorial, language and
library reference, HOWTOs, FAQ: ~12 MB, ~500 files) as plain text, so no HTML scraping is needed; it is English
technical prose with code examples, which is the domain the demo tokenizer was trained on (Python stdlib sources),
so words cost few tokens; and it is under the PSF licence, which allows redistribution and derived works.

Writes into --out (git-ignored .carry/, carried to the GPU machine by the lead):
  train.txt     documents separated by <|endoftext|>, reST markup reduced to text
  heldout.txt   the same for ~3% of the files (chosen by a hash of the path, so stable), never trained on
Some sections are also written as chat turns in the demo's chat format (a question naming the section title,
the section's first paragraphs as the answer, then <|im_end|>), so the trained model answers a chat prompt with
prose and ends its turn.
"""
import argparse
import os
import random
import re
import zlib

SEP = "<|endoftext|>"
UNDERLINE = re.compile(r"^([=\-~^*+#\"'`:.])\1{2,}\s*$")
ROLE = re.compile(r":[a-z:]+:`([^`]*)`")
LINK = re.compile(r"`([^`<]+?)\s*<[^>]*>`_+")
ADMONITIONS = {"note": "Note:", "warning": "Warning:", "seealso": "See also:", "important": "Important:",
               "tip": "Tip:", "impl-detail": "CPython implementation detail:"}
VERSIONED = {"versionadded": "New in version {}.", "versionchanged": "Changed in version {}.",
             "deprecated": "Deprecated since version {}."}
DESCRIBED = ("function", "method", "class", "exception", "attribute", "data", "decorator", "classmethod",
             "staticmethod", "module", "opcode", "cmdoption", "option", "envvar", "describe", "pdbcommand",
             "c:function", "c:macro", "c:type", "c:member", "c:var", "abstractmethod", "coroutinefunction",
             "coroutinemethod", "decoratormethod", "awaitablefunction")
QUESTIONS = ["Tell me about {}.", "{}", "Please explain: {}", "What can you tell me about {}?"]


def role_text(match):
    """`:func:`len`` -> `len`; `:ref:`text <label>`` -> text; `~a.b.c` -> `c`; `!x` -> x."""
    inner = match.group(1)
    label = re.match(r"(.*?)\s*<[^>]*>$", inner)
    if label:
        return label.group(1)
    inner = inner.lstrip("!")
    if inner.startswith("~"):
        inner = inner[1:].split(".")[-1]
    role = match.group(0).split("`")[0]
    if any(k in role for k in (":ref:", ":term:", ":doc:", ":dfn:", ":emphasis:", ":title-reference:")):
        return inner
    if ":pep:" in role:
        return "PEP " + inner
    if ":rfc:" in role:
        return "RFC " + inner
    return "`" + inner + "`"


def inline(line):
    line = ROLE.sub(role_text, line)
    line = LINK.sub(r"\1", line)
    line = line.replace("``", "`").replace("\\ ", "")
    line = re.sub(r"\*\*([^*]+)\*\*", r"\1", line)
    line = re.sub(r"(?<![\w*])\*([^*\s][^*]*)\*(?![\w*])", r"\1", line)
    line = re.sub(r"\|(\w+)\|", r"\1", line)
    return line


def rst_to_text(source):
    """Plain text and a list of (title, first paragraphs) sections from one reST file."""
    lines = source.splitlines()
    out, sections = [], []
    skip_indent = None  # inside a directive whose body is dropped (index, toctree, comments...)
    i = 0
    while i < len(lines):
        line = lines[i].rstrip()
        indent = len(line) - len(line.lstrip())
        if skip_indent is not None:
            if line and indent <= skip_indent:
                skip_indent = None
            else:
                i += 1
                continue
        if UNDERLINE.match(line):  # over/underline of a title: the title line carries the text
            i += 1
            continue
        if i + 1 < len(lines) and line.strip() and UNDERLINE.match(lines[i + 1].rstrip()) \
                and len(lines[i + 1].rstrip()) >= len(line.strip()) and not line.startswith(" "):
            title = inline(line.strip())
            sections.append([re.sub(r"^[\d.]+\s+", "", title).strip("`"), []])
            out += ["", title, ""]
            i += 2
            continue
        stripped = line.strip()
        directive = re.match(r"\.\.\s+([\w:-]+)::\s*(.*)$", stripped)
        if stripped.startswith(".. ") and not directive:  # comment or label target
            skip_indent = indent
            i += 1
            continue
        if directive:
            name, arg = directive.group(1), directive.group(2)
            if name in ADMONITIONS:
                out.append(" " * indent + ADMONITIONS[name] + (" " + inline(arg) if arg else ""))
            elif name in VERSIONED:
                out.append(" " * indent + VERSIONED[name].format(arg.split()[0] if arg else "?"))
            elif name.split(":")[-1] in DESCRIBED or name in DESCRIBED:
                out += ["", " " * indent + inline(arg), ""]
            elif name in ("code-block", "sourcecode", "code", "doctest", "testcode", "productionlist"):
                pass  # the indented body follows and is kept as code
            else:
                skip_indent = indent
            i += 1
            while i < len(lines) and re.match(r"^\s+:[\w-]+:", lines[i]):  # directive options
                i += 1
            continue
        if stripped == "::":
            i += 1
            continue
        if stripped.endswith("::"):
            line = line[:-1]
        text = inline(line)
        out.append(text)
        if sections and not line.startswith(" ") and text.strip():
            sections[-1][1].append(text.strip())
        elif sections and not text.strip() and sections[-1][1] and sections[-1][1][-1] != "":
            sections[-1][1].append("")
        i += 1
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip() + "\n"
    return text, sections


def answer_of(paragraph_lines, max_words=120):
    """The first paragraphs of a section, joined into lines, cut after max_words at a sentence end."""
    paragraphs, current = [], []
    for line in paragraph_lines:
        if line:
            current.append(line)
        elif current:
            paragraphs.append(" ".join(current))
            current = []
    if current:
        paragraphs.append(" ".join(current))
    kept, words = [], 0
    for p in paragraphs:
        kept.append(p)
        words += len(p.split())
        if words >= max_words // 2:
            break
    text = "\n\n".join(kept)
    if len(text.split()) > max_words:
        cut = " ".join(text.split()[:max_words])
        end = cut.rfind(". ")
        text = cut[:end + 1] if end > 0 else cut
    return text.strip()


def chat_turn(question, answer):
    # The demo chat template's thinking-off form of an assistant turn (tokenizer_config.json's chat_template).
    return (f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
            f"{answer}<|im_end|>\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src", default="/usr/share/doc/python3.11/html/_sources")
    parser.add_argument("--out", default=".carry/demo-text")
    parser.add_argument("--heldout-percent", type=int, default=3)
    parser.add_argument("--seed", type=int, default=20261202)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    paths = []
    for base, dirs, names in os.walk(args.src):
        dirs.sort()
        paths += [os.path.join(base, n) for n in sorted(names) if n.endswith(".txt")]
    if not paths:
        raise SystemExit(f"{args.src}: no .txt files (apt-get install -y python3.11-doc)")
    docs = {"train": [], "heldout": []}
    chats = 0
    for path in paths:
        rel = os.path.relpath(path, args.src)
        if rel.startswith(("whatsnew/", "license", "copyright", "bugs", "contents", "genindex")):
            continue  # changelogs and legal text: lists of names and numbers more than prose
        text, sections = rst_to_text(open(path, encoding="utf-8", errors="replace").read())
        split = "heldout" if zlib.crc32(rel.encode()) % 100 < args.heldout_percent else "train"
        docs[split].append(text)
        for title, body in sections:
            answer = answer_of(body)
            if len(title) < 3 or len(answer.split()) < 12:
                continue
            docs[split].append(chat_turn(rng.choice(QUESTIONS).format(title), answer))
            chats += 1
    os.makedirs(args.out, exist_ok=True)
    for split, items in docs.items():
        rng.shuffle(items)  # chat turns spread through the corpus, not bunched after their document
        path = os.path.join(args.out, f"{split}.txt")
        with open(path, "w", encoding="utf-8") as f:
            f.write(SEP.join(items))
        print(f"{path}: {len(items)} documents, {os.path.getsize(path) / 1e6:.1f} MB")
    print(f"{chats} chat turns from section titles")


if __name__ == "__main__":
    main()
