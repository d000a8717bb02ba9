"""REST routers, one per resource, each a thin adapter over the service of the same
name (vigil/services/); `vigil.api.build_app` includes them."""
