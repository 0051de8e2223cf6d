"""Keys onnxcomp writes into a rewritten model's metadata_props."""
from __future__ import annotations

import json
from collections.abc import Mapping, MutableMapping

# JSON {tensor name: predicted bytes}: lets analysis size tensors whose shape is data-dependent (encoded payloads,
# run-time-sized copies), so a rewritten graph can be analysed and rewritten again.
PLAN_METADATA_KEY = "onnxcomp.plan"


def merge_size_hints(metadata_props: MutableMapping[str, str], hints: Mapping[str, int | None]) -> None:
    """Add ``hints`` (tensor name → bytes; None entries skipped) to the model's ``PLAN_METADATA_KEY`` entry."""
    existing = metadata_props.get(PLAN_METADATA_KEY)
    merged = json.loads(existing) if existing else {}
    merged.update({name: int(nbytes) for name, nbytes in hints.items() if nbytes is not None})
    metadata_props[PLAN_METADATA_KEY] = json.dumps(merged, sort_keys=True)
