"""The System One decision prompt, written from ../shared/spec/systemone.md: plain Python, no torch, so that the
tests on a machine without it can compare duet's encoder with it (tests/decision/prompt_reference_test.cc).

  render / options_of / option_text   the spec's text of a value, of a question's options
  encode                              the exact prompt: each piece tokenized on its own, then concatenated; spans
                                      half-open over the final ids

Run as a script, it reads request bodies (one JSON text a line) and writes, a line each, the prompt's pieces as
text (tokenize(text) = [text]) with the spans over them, or the refusal: what the encoder does before any tokenizer.
"""
import json
import sys

PREFIX = ("<|im_start|>system\nRead the complete state and schema. Decide every field jointly. Each answer must be "
          "exactly one of that field's allowed options.<|im_end|>\n<|im_start|>user\nSTATE:\n")
SCHEMA_HEADER = "\n\nSCHEMA FIELDS:\n"
SUFFIX = "\n<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nJOINT SCHEMA DECISIONS:"
NOUL_DEFAULTS = {"true": "The proposition is true or the answer is yes.",
                 "false": "The proposition is false or the answer is no."}
TYPE_IDS = {"noul": 0, "choice": 1, "score": 2}
REFERENCE_MAX_LENGTH = 16384


def render(value):
    """A string as is; anything else as Python's json.dumps with sorted keys and raw UTF-8 (the spec's render)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def options_of(question):
    """(option_id, description or None) in ENCODED order: noul true, false; choice sorted by code point; score 0.."""
    kind, criteria = question["type"], question.get("criteria")
    if kind == "noul":
        criteria = criteria or {}
        return [(key, criteria.get(key, NOUL_DEFAULTS[key])) for key in ("true", "false")]
    if kind == "choice":
        return sorted(criteria.items(), key=lambda item: item[0])  # Python str order is code point order
    if kind == "score":
        return [(str(k), level) for k, level in enumerate(criteria)]
    raise ValueError(f"unknown question type {kind!r}")


def option_text(option_id, description):
    value = {"option_id": option_id}
    if description is not None:
        value["description"] = description
    return render(value)


class Refused(Exception):
    """The request does not fit the token budget: code is 'state_too_long' or 'schema_too_long'."""

    def __init__(self, code, **counts):
        super().__init__(f"{code}: {counts}")
        self.code = code
        self.counts = counts


def encode(tokenize, request, max_length=REFERENCE_MAX_LENGTH, truncation=None):
    """Ids and spans of one request. tokenize(text) -> list of ids, added tokens matched, none inserted.

    Spans are half-open over the final ids. By default a state that does not fit is refused; with truncation
    'state_head' the head of the state is kept (the reference's rule) and the count dropped is returned.
    """
    prefix = tokenize(PREFIX)
    state = tokenize(render(request["state"]))
    schema = tokenize(SCHEMA_HEADER)
    questions = []  # spans relative to the start of the schema, shifted once the state length is known
    for k, (qid, question) in enumerate(request["questions"].items(), start=1):
        kind = question["type"]
        # The spec's render(instructions or id): any JSON value, and Python's truthiness picks the id for null, "",
        # false, 0, 0.0, [] and {}.
        instructions = question.get("instructions") or qid
        schema += tokenize(f"\nFIELD {k}\nID: {qid}\nTYPE: {kind}\nINSTRUCTION: ")
        start = len(schema)
        schema += tokenize(render(instructions))
        entry = {"id": qid, "type": kind, "type_id": TYPE_IDS[kind], "span": [start, len(schema)], "options": []}
        schema += tokenize("\nALLOWED OPTIONS:\n")
        for j, (option_id, description) in enumerate(options_of(question), start=1):
            schema += tokenize(f"OPTION {j}: ")
            start = len(schema)
            schema += tokenize(option_text(option_id, description))
            entry["options"].append({"id": option_id, "span": [start, len(schema)]})
            schema += tokenize("\n")
        schema += tokenize("END FIELD\n")
        questions.append(entry)
    suffix = tokenize(SUFFIX)
    fixed = len(prefix) + len(schema) + len(suffix)
    counts = dict(fixed_tokens=fixed, state_tokens=len(state), max_length=max_length)
    if fixed > max_length:
        raise Refused("schema_too_long", **counts)
    kept = len(state)
    if fixed + len(state) > max_length:
        if truncation != "state_head":
            raise Refused("state_too_long", **counts)
        kept = max_length - fixed
    shift = len(prefix) + kept
    for entry in questions:
        for spanned in [entry] + entry["options"]:
            spanned["span"] = [spanned["span"][0] + shift, spanned["span"][1] + shift]
            if spanned["span"][0] >= spanned["span"][1]:
                raise ValueError(f"empty span in question {entry['id']!r}")  # the mean would be undefined
    ids = prefix + state[:kept] + schema + suffix
    return dict(ids=ids, input_tokens=len(ids), fixed_tokens=fixed, state_tokens=len(state),
                state_tokens_dropped=len(state) - kept, questions=questions)


def pieces(request):
    """The prompt as text pieces: encode() with each piece its own 'token' (an empty text gives none)."""
    try:
        encoding = encode(lambda text: [text] if text else [], request, max_length=1 << 62)
    except ValueError:
        return {"refused": "empty_span"}
    return {"pieces": encoding["ids"],
            "questions": [{"span": q["span"], "options": [o["span"] for o in q["options"]]}
                          for q in encoding["questions"]]}


if __name__ == "__main__":
    for line in sys.stdin:
        if line.strip():
            print(json.dumps(pieces(json.loads(line)), ensure_ascii=False))
