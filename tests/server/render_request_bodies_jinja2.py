"""Renders chat request bodies (one JSON object a line) the way a Python server on transformers does: each line read
with json.loads (which keeps the client's key order), the messages and tools handed to the chat template compiled as
transformers compiles it (render_chat_jinja2.load_template: `tojson` is json.dumps). As vLLM does before rendering,
tool-call arguments sent as a JSON string are json.loads'ed into a dict, `developer` is the system role, and
tool_choice "none" hides the tools. duet's forced tool calls (src/server/tool_choice.h) are written here from their
rule, independently of the server: tool_choice "required" or a named function renders without thinking and appends
the opening of the call the template itself writes ("<tool_call>\n", then "<function=NAME>\n" for a named one).
Prints a JSON list of {text} or {error}, one per line of the input.
Usage: python3 render_request_bodies_jinja2.py TEMPLATE BODIES.jsonl"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tokenizer"))
from render_chat_jinja2 import load_template  # noqa: E402


def prepared_messages(messages):
    for message in messages:
        if message.get("role") == "developer":
            message["role"] = "system"
        for call in message.get("tool_calls") or []:
            arguments = call.get("function", {}).get("arguments")
            if isinstance(arguments, str):
                call["function"]["arguments"] = json.loads(arguments) if arguments else {}
    return messages


def forced_start(tool_choice):
    if tool_choice == "required":
        return "<tool_call>\n"
    if isinstance(tool_choice, dict):
        return "<tool_call>\n<function=" + tool_choice["function"]["name"] + ">\n"
    return ""


def render(template, body):
    tools = body.get("tools")
    if body.get("tool_choice") == "none":
        tools = None
    kwargs = body.get("chat_template_kwargs") or {}
    forced = forced_start(body.get("tool_choice"))
    thinking = kwargs.get("enable_thinking", body.get("reasoning_effort", "medium") != "none") and not forced
    return template.render(messages=prepared_messages(body["messages"]), tools=tools or None,
                           add_generation_prompt=True, enable_thinking=thinking) + forced


def main():
    template = load_template(sys.argv[1])
    out = []
    for line in open(sys.argv[2], encoding="utf-8"):
        if not line.strip():
            continue
        try:
            out.append({"text": render(template, json.loads(line))})
        except Exception as e:  # noqa: BLE001 - every failure is reported to the test as data
            out.append({"error": str(e)})
    sys.stdout.write(json.dumps(out))


if __name__ == "__main__":
    main()
