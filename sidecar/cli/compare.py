"""``shadowtrial compare``: one prompt, several models, shown side by side as they stream.

Reads ``POST /v1/compare``'s server-sent events: each answer is printed as it arrives
(model, latency, cost, then the text), each score beside its model once judged, and at
the end a table of all of them in arrival order and the ``shadowtrial trials create``
command that would start a trial of two of them. Nothing is kept, here or on the sidecar.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import textwrap
from typing import Any, Callable, Iterator


def add_parser(sub: Any, client: Callable[[argparse.ArgumentParser], None]) -> None:
    cmp = sub.add_parser("compare", help="one prompt, several models side by side, scored; nothing kept",
                         description="POST /v1/compare: every model answers the prompt at once; answers are shown "
                                     "as they arrive, each with latency, list-priced cost and an absolute score.")
    client(cmp)
    cmp.add_argument("--team", required=True)
    cmp.add_argument("--model", "-m", action="append", required=True, dest="models",
                     help="a model to ask (2 to 6; repeat the option)")
    cmp.add_argument("--prompt", required=True, help="the user message")
    cmp.add_argument("--system", help="a system message before it")
    cmp.add_argument("--rubric", help="absolute rubric id (default absolute-v1)")
    cmp.add_argument("--max-tokens", type=int, help="output bound of each answer (default 512)")
    cmp.add_argument("--cap-usd", type=float, help="spend cap of this compare, US dollars (default 1.0)")


def compare_body(args: argparse.Namespace) -> dict[str, Any]:
    messages = ([{"role": "system", "content": args.system}] if args.system else []) + [
        {"role": "user", "content": args.prompt}]
    body: dict[str, Any] = {"team": args.team, "models": args.models, "messages": messages}
    for dest, key in (("rubric", "rubric"), ("max_tokens", "max_tokens"), ("cap_usd", "spend_cap_usd")):
        if getattr(args, dest) is not None:
            body[key] = getattr(args, dest)
    return body


def events(lines: Iterator[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(event, data) pairs of a server-sent event stream."""
    event = "message"
    for line in lines:
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            yield event, json.loads(line[6:])
            event = "message"


#: ``POST /v1/trials`` body fields of a compare's trial hint → the ``trials create`` flag.
_HINT_FLAGS = {"team": "--team", "incumbent_model": "--incumbent", "candidate_model": "--candidate",
               "spend_cap_usd": "--cap-usd", "sample_rate": "--sample-rate"}


def trial_command(body: dict[str, Any]) -> str:
    """The ``shadowtrial trials create`` command that sends ``body`` (a compare's trial hint),
    each value quoted for a POSIX shell; a field with no flag here is named with its own."""
    words = ["shadowtrial", "trials", "create"]
    for key, value in body.items():
        words += [_HINT_FLAGS.get(key, "--" + key.replace("_", "-")), str(value)]
    return " ".join(shlex.quote(w) for w in words)


def _cost(cost: dict[str, Any]) -> str:
    if cost.get("coverage") == "unknown":
        return "cost unknown"
    partial = "" if cost.get("coverage") == "complete" else " (partial)"
    return f"${cost.get('known_micros', 0) / 1e6:.6f}{partial}"


def run(args: argparse.Namespace, base: str, auth: dict[str, str]) -> int:
    import httpx  # on use: the CLI starts without it

    width = max(40, min(shutil.get_terminal_size((100, 20)).columns, 120))
    rows: list[list[str]] = []
    scores: dict[str, str] = {}
    try:
        with httpx.stream("POST", f"{base}/v1/compare", json=compare_body(args), headers=auth,
                          timeout=httpx.Timeout(30.0, read=300.0)) as r:
            if r.status_code != 200:
                r.read()
                try:
                    err = r.json()["error"]
                    field = f" (field {err['field']})" if err.get("field") else ""
                    raise SystemExit(f"shadowtrial: {r.status_code} {err['code']}: {err['message']}{field}")
                except (ValueError, KeyError, TypeError):
                    raise SystemExit(f"shadowtrial: {r.status_code} {r.reason_phrase} from {base}/v1/compare") from None
            for event, data in events(r.iter_lines()):
                if args.json:
                    print(json.dumps({"event": event, **data}))
                    continue
                if event == "answer":
                    head = f"── {data['model']} · {data['latency_ms']:.0f} ms · {_cost(data['cost'])} "
                    print(head + "─" * max(0, width - len(head)))
                    text = data["content"] if data["ok"] else f"(no answer: {data['error']})"
                    print(textwrap.fill(text or "", width=width, replace_whitespace=False))
                    rows.append([data["model"], f"{data['latency_ms']:.0f} ms", _cost(data["cost"])])
                elif event == "score":
                    scores[data["model"]] = f"{data['score']}/10" if data["score"] is not None else f"— ({data['error']})"
                    print(f"   {data['model']}: absolute score {scores[data['model']]} ({data['rubric']})")
                elif event == "done":
                    print("\nmodel / latency / cost / absolute score (arrival order; scores are levels, not deltas)")
                    for model, latency, cost in rows:
                        print(f"  {model:<28} {latency:>9}  {cost:<22} {scores.get(model, '—')}")
                    print("\nnothing of this compare was kept. To judge two of these on real traffic, start a trial "
                          "(the model the gateway serves as --incumbent):")
                    print(f"  {trial_command(data['trial_hint']['body'])}")
    except httpx.HTTPError as exc:
        raise SystemExit(f"shadowtrial: cannot reach the admin API at {base}: {exc}") from None
    return 0
