"""The documentation site's generated pages: references made from the code (the config,
the app spec, model.yaml, the CLI, the REST API, the metrics) and benchmark tables made
from committed results, so that neither can drift from what they describe."""
