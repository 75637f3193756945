#!/usr/bin/env python3
"""Writes tests/grammar/schemas_generated.jsonl: JSON Schemas in the subset duet supports (docs/api.md), generated
from a fixed seed so the file is reproducible: scalars with bounds, lengths, patterns and formats; objects with
required subsets and additionalProperties; arrays with items, prefixItems and counts; anyOf / type unions;
allOf merges; $defs and recursive $refs; and the shapes clients send (zod-to-json-schema as the AI SDK and LangChain
emit it, pydantic's nullable anyOf with titles and defaults, OpenAI strict mode: every property required, no extras).
The tests walk each schema's grammar and validate the documents with ajv (walk_test.cc); nothing here decides
validity. Usage: python3 tests/grammar/generate_schemas.py [COUNT] > tests/grammar/schemas_generated.jsonl"""
import json
import random
import sys

PATTERNS = ["^[a-z]{2,5}$", "^[A-Z][a-z]+$", "^\\d{3}-\\d{4}$", "^(red|green|blue)$", "^[a-f0-9]{6}$",
            "^v\\d+\\.\\d+$", "^[A-Z]{2}\\d{2}[a-z]?$", "^(foo|bar)+$", "^\\w{1,8}$", "^[^@\\s]{1,6}@x\\.com$"]
FORMATS = ["date", "time", "date-time", "uuid", "email", "uri"]
WORDS = ["name", "id", "count", "price", "tags", "items", "owner", "kind", "note", "score", "when", "level", "ok",
         "size", "mode", "city", "code", "parts", "meta", "value", "title", "step", "list", "flag", "unit", "ref"]


class Gen:
    def __init__(self, seed):
        self.r = random.Random(seed)

    def pick(self, xs):
        return self.r.choice(xs)

    def string(self):
        kind = self.r.randrange(5)
        if kind == 0:
            return {"type": "string"}
        if kind == 1:
            lo = self.r.randrange(0, 4)
            return {"type": "string", "minLength": lo, "maxLength": lo + self.r.randrange(0, 12)}
        if kind == 2:
            return {"type": "string", "pattern": self.pick(PATTERNS)}
        if kind == 3:
            return {"type": "string", "format": self.pick(FORMATS)}
        return {"type": "string", "enum": self.r.sample(["a", "b", "c d", "é", "x\"y", "z\\w", "ok"], self.r.randrange(1, 4))}

    def number(self):
        integer = self.r.random() < 0.6
        s = {"type": "integer" if integer else "number"}
        if self.r.random() < 0.7:
            lo = self.r.randrange(-50, 50)
            if self.r.random() < 0.5:
                s["minimum"] = lo
            else:
                s["exclusiveMinimum"] = lo
            if self.r.random() < 0.8:
                s["maximum" if self.r.random() < 0.5 else "exclusiveMaximum"] = lo + self.r.randrange(2, 200)
        return s

    def scalar(self):
        k = self.r.randrange(8)
        if k < 3:
            return self.string()
        if k < 5:
            return self.number()
        if k == 5:
            return {"type": "boolean"}
        if k == 6:
            return {"enum": self.r.sample([1, "two", None, True, 3.5, "x"], self.r.randrange(1, 4))}
        return {"const": self.pick(["fixed", 7, False, None])}

    def value(self, depth):
        k = self.r.randrange(10)
        if depth <= 0 or k < 5:
            return self.scalar()
        if k < 7:
            return self.obj(depth - 1)
        if k < 9:
            return self.array(depth - 1)
        return self.union(depth - 1)

    def array(self, depth):
        s = {"type": "array", "items": self.value(depth) if depth > 0 else self.scalar()}
        if self.r.random() < 0.3:
            s["prefixItems"] = [self.scalar() for _ in range(self.r.randrange(1, 3))]
        if self.r.random() < 0.5:
            s["minItems"] = self.r.randrange(0, 2)
        s["maxItems"] = s.get("minItems", 0) + self.r.randrange(1, 4)
        return s

    def union(self, depth):
        k = self.r.randrange(3)
        if k == 0:
            return {"type": self.r.sample(["string", "integer", "boolean", "null", "number"], 2)}
        # anyOf only: duet writes oneOf as anyOf, and overlapping generated branches would break oneOf's "exactly one".
        return {"anyOf": [self.value(depth) for _ in range(self.r.randrange(2, 4))]}

    def obj(self, depth, strict=False):
        names = self.r.sample(WORDS, self.r.randrange(1, 6))
        props = {n: self.value(depth) for n in names}
        s = {"type": "object", "properties": props}
        if strict:
            s["required"] = names
            s["additionalProperties"] = False
            return s
        s["required"] = [n for n in names if self.r.random() < 0.6]
        a = self.r.randrange(3)
        if a == 0:
            s["additionalProperties"] = False
        elif a == 1 and not s["required"]:
            pass
        return s

    def recursive(self):
        k = self.r.randrange(3)
        if k == 0:  # a tree
            return {"$defs": {"node": {"type": "object", "properties": {
                "v": self.number(), "kids": {"type": "array", "items": {"$ref": "#/$defs/node"},
                                             "maxItems": self.r.randrange(1, 3)}},
                "required": ["v", "kids"], "additionalProperties": False}}, "$ref": "#/$defs/node"}
        if k == 1:  # a linked list
            return {"type": "object", "properties": {"head": self.scalar(),
                    "tail": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}}, "required": ["head", "tail"],
                    "additionalProperties": False}
        defs = {f"T{i}": self.obj(1) for i in range(self.r.randrange(1, 3))}
        return {"$defs": defs, "type": "object",
                "properties": {n: {"$ref": f"#/$defs/{self.pick(list(defs))}"} for n in self.r.sample(WORDS, 2)}}

    def all_of(self):
        a, b = self.obj(0), self.obj(0)
        for s in (a, b):
            s.pop("additionalProperties", None)
        # Disjoint properties: a name in both parts with two schemas is a conflict duet refuses by name.
        b["properties"] = {n: v for n, v in b["properties"].items() if n not in a["properties"]} or {"extra": {"type": "null"}}
        b["required"] = [n for n in b["required"] if n in b["properties"]]
        return {"allOf": [a, b]}

    def zod(self):
        s = self.obj(2, strict=True)
        s["$schema"] = "http://json-schema.org/draft-07/schema#"
        return s

    def pydantic(self):
        props, required = {}, []
        for n in self.r.sample(WORDS, self.r.randrange(2, 6)):
            inner = self.scalar()
            if self.r.random() < 0.5:
                props[n] = {"anyOf": [inner, {"type": "null"}], "default": None, "title": n.title()}
            else:
                props[n] = dict(inner, title=n.title())
                required.append(n)
        return {"title": "Model", "type": "object", "properties": props, "required": required}

    def schema(self, i):
        k = i % 9
        return [lambda: self.scalar(), lambda: self.obj(2), lambda: self.array(2), lambda: self.union(2),
                self.recursive, self.all_of, self.zod, self.pydantic, lambda: self.obj(3, strict=True)][k]()


def main():
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 270
    gen = Gen(19)
    kinds = ["scalar", "object", "array", "union", "recursive", "allof", "zod", "pydantic", "strict"]
    for i in range(count):
        print(json.dumps({"name": f"gen{i:03d}_{kinds[i % 9]}", "schema": gen.schema(i)}, ensure_ascii=False))


if __name__ == "__main__":
    main()
