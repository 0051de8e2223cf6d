"""Keys onnxcomp writes into a rewritten model's metadata_props."""

# JSON {payload tensor name: predicted bytes}: lets analysis size payloads whose shape is data-dependent.
PLAN_METADATA_KEY = "onnxcomp.plan"
