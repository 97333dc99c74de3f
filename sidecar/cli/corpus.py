"""``shadowtrial datasets import|list|show``: the corpus API from the command line.

The corpus API is served by the control plane, so its URL is ``--url`` (default
``$SHADOWTRIAL_CORPUS_URL``, else the admin URL). A file's format comes from ``--format``
or its extension (``.jsonl``, ``.csv``). ``import --dataset ID`` imports a new version of
an existing dataset (over ``--base-version``, default its latest).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Callable, Mapping

from sidecar.collector.corpus.formats import FORMATS

Call = Callable[..., dict[str, Any]]


def add_commands(sub: Any, client: Callable[[argparse.ArgumentParser], None]) -> None:
    datasets = sub.add_parser("datasets", help="import, list and show corpus datasets")
    dsub = datasets.add_subparsers(dest="action", required=True)
    imp = dsub.add_parser("import", help="import a JSONL or CSV file as a new dataset (or a new version of one)")
    imp.add_argument("file", help="the JSONL or CSV file")
    imp.add_argument("--team", help="the team (a new dataset)")
    imp.add_argument("--name", help="the dataset's name (a new dataset)")
    imp.add_argument("--dataset", help="import a new version of this dataset instead")
    imp.add_argument("--base-version", dest="base_version", type=int, help="the version the import replaces")
    imp.add_argument("--format", choices=FORMATS, help="default: from the file's extension")
    lst = dsub.add_parser("list", help="list datasets")
    lst.add_argument("--team")
    show = dsub.add_parser("show", help="a dataset and its versions")
    show.add_argument("dataset_id")
    for sp in (imp, lst, show):
        client(sp)
        sp.add_argument("--url", default=None, help="corpus API URL (default $SHADOWTRIAL_CORPUS_URL, else the admin URL)")


def _format(args: argparse.Namespace) -> str:
    if args.format:
        return str(args.format)
    for fmt in FORMATS:
        if args.file.lower().endswith(f".{fmt}"):
            return fmt
    raise SystemExit(f"shadowtrial: say --format ({' or '.join(FORMATS)}): {args.file!r} has neither extension")


def render_version(v: Mapping[str, Any]) -> str:
    parent = "" if v.get("parent") is None else f" from version {v['parent']}"
    return f"  version {v['version']}: {v['item_count']} items, {v['source']}{parent}, digest {v['digest']}"


def run(args: argparse.Namespace, admin_base: str, auth: dict[str, str], environ: Mapping[str, str], call: Call) -> int:
    base = (args.url or environ.get("SHADOWTRIAL_CORPUS_URL") or admin_base).rstrip("/")
    if args.action == "import":
        fmt = _format(args)
        try:
            body = Path(args.file).read_bytes()
        except OSError as exc:
            raise SystemExit(f"shadowtrial: cannot read {args.file!r}: {exc.strerror or exc}") from None
        if args.dataset:
            params: dict[str, str] = {"format": fmt}
            if args.base_version is not None:
                params["base_version"] = str(args.base_version)
            data = call("POST", f"{base}/v1/datasets/{args.dataset}/versions", params=params, content=body, headers=auth)
            print(json.dumps(data, indent=2) if args.json else render_version(data))
            return 0
        if not args.team or not args.name:
            raise SystemExit("shadowtrial: a new dataset needs --team and --name (or --dataset ID for a new version)")
        data = call("POST", f"{base}/v1/datasets", params={"team": args.team, "name": args.name, "format": fmt},
                    content=body, headers=auth)
        print(json.dumps(data, indent=2) if args.json else
              f"dataset {data['id']} ({data['team']}/{data['name']})\n{render_version(data['version'])}")
        return 0
    if args.action == "list":
        data = call("GET", f"{base}/v1/datasets", params={"team": args.team} if args.team else {}, headers=auth)
        if args.json:
            print(json.dumps(data, indent=2))
        else:
            for d in data.get("datasets", []):
                print(f"{d['id']}  {d['team']}/{d['name']}  latest version {d['latest_version']}")
        return 0
    data = call("GET", f"{base}/v1/datasets/{args.dataset_id}", headers=auth)
    print(json.dumps(data, indent=2) if args.json else
          "\n".join([f"dataset {data['id']} ({data['team']}/{data['name']})",
                     *(render_version(v) for v in data.get("versions", []))]))
    return 0
