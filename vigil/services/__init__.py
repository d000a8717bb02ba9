"""The server's services, one per resource (streams, apps, models, events, captions,
the LLM): small classes over storage and the engine that the REST routers, the gRPC
servicer and the CLI share; `vigil.service.Vigil` composes them and owns their lifecycle."""
