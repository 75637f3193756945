"""Renders every case of a chat-cases file with Jinja2 set up as transformers' apply_chat_template sets it up
(trim_blocks, lstrip_blocks, loopcontrols, json.dumps tojson, raise_exception) and prints a JSON list of
{name, text} or {name, error}. Usage: python3 render_chat_jinja2.py TEMPLATE CASES"""
import json
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def load_template(path):
    """The template at `path`, compiled as transformers compiles chat templates."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env.from_string(open(path, encoding="utf-8").read())


def main():
    template = load_template(sys.argv[1])
    cases = json.load(open(sys.argv[2], encoding="utf-8"))
    out = []
    for c in cases:
        try:
            text = template.render(messages=c["messages"], tools=c.get("tools"),
                                   add_generation_prompt=c.get("add_generation_prompt", True),
                                   enable_thinking=c.get("enable_thinking", True))
            out.append({"name": c["name"], "text": text})
        except Exception as e:  # noqa: BLE001 - every failure is reported to the test as data
            out.append({"name": c["name"], "error": str(e)})
    sys.stdout.write(json.dumps(out))


if __name__ == "__main__":
    main()
