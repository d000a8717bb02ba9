"""The platform shell: settings, storage, REST API, dashboard and the CLI."""

__version__ = "0.1.0"
