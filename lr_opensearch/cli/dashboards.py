"""``lr dashboards export``: saved objects for OpenSearch Dashboards or Kibana.

    lr dashboards export --index I [--pattern 'lr-*'] [--kibana] [--out lr-objects.ndjson]

Import them in Dashboards (Management > Saved objects > Import) or with
``curl -X POST 'http://localhost:5601/api/saved_objects/_import?overwrite=true'
-H 'osd-xsrf: true' --form file=@lr-objects.ndjson`` (Kibana: ``kbn-xsrf: true``).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from lr_opensearch.cli.common import add_connection_args, client_from_args, quiet_transport
from lr_opensearch.errors import ConfigError


def _cmd_export(args: argparse.Namespace) -> int:
    from lr_opensearch.dashboards.saved_objects import check_references, saved_objects, to_ndjson
    from lr_opensearch.engine.factory import make_adapter

    quiet_transport(args)
    adapter = make_adapter(client_from_args(args))
    mapping = adapter.index_mapping(args.index)
    meta = adapter.index_meta(args.index)
    if not meta:
        raise ConfigError(f"index {args.index!r} was not created by lr-opensearch (no "
                          "_meta.lightretriever)")
    kind = "kibana" if args.kibana or adapter.engine == "elasticsearch" else "opensearch-dashboards"
    objects = saved_objects(args.index, mapping, meta, pattern=args.pattern, kind=kind)
    problems = check_references(objects)
    if problems:  # internal invariant
        raise ConfigError("; ".join(problems))
    Path(args.out).write_text(to_ndjson(objects), encoding="utf-8")
    print(f"wrote {len(objects)} saved objects for {kind} to {args.out} (index pattern "
          f"{args.pattern or args.index}, bundle {meta.get('bundle_id')})")
    return 0


def register(subparsers: Any) -> None:
    """Add ``lr dashboards`` to the ``lr`` dispatcher."""
    p = subparsers.add_parser("dashboards", help="saved objects for Dashboards / Kibana",
                              description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="dashboards_command", metavar="ACTION", required=True)
    e = sub.add_parser("export", help="write the saved objects of an LR index as ndjson")
    e.add_argument("--index", required=True)
    e.add_argument("--pattern", default=None,
                   help="index pattern title (default: the index name), e.g. 'lr-*'")
    e.add_argument("--kibana", action="store_true",
                   help="Kibana objects (default for an Elasticsearch cluster)")
    e.add_argument("--out", default="lr-objects.ndjson", help="output file (default %(default)s)")
    add_connection_args(e)
    e.set_defaults(func=_cmd_export)
