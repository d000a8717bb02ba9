"""The mistakes a service reports, each with the status every transport maps it to.

`BadRequest` (400: a request the OpenAI protocol refuses as OpenAI does), `Forbidden`
(403: the limits do not allow it), `NotFound` (404, also for a name in a
body that names nothing), `Conflict` (409), `Invalid` (422, naming the field),
`TooLarge` (413), `Overloaded` (503, with Retry-After), `Unauthorized` (401).
"""

from __future__ import annotations


class ServiceError(Exception):
    status = 400
    headers: dict[str, str] | None = None


class BadRequest(ServiceError):
    status = 400


class Unauthorized(ServiceError):
    status = 401
    headers = {"WWW-Authenticate": "Bearer"}


class Forbidden(ServiceError):
    status = 403


class NotFound(ServiceError):
    status = 404


class Conflict(ServiceError):
    status = 409


class Invalid(ServiceError):
    status = 422


class TooLarge(ServiceError):
    status = 413


class Overloaded(ServiceError):
    status = 503
    headers = {"Retry-After": "1"}


class GenerationError(ServiceError):
    """The LLM failed a request (not the client's mistake)."""

    status = 500
