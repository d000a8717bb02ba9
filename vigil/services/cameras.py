"""Cameras declared in the server config: each a stream and the apps that watch it.

`apply` makes the running server match the declaration, through the same stream and
app services as the REST API, so a mistake reads as the API would say it (prefixed
with the camera it is in), and one camera's mistake leaves the others applied:

- a declared camera missing is added; one whose url or options changed is started
  again with them (apps added over the API that watch it are put back as they were);
- a declared app missing is added; one whose spec changed is replaced (its tracks and
  counts start again);
- a camera or app the previous declaration had and this one has not is deleted.

What the API added and no declaration names is left alone. The declaration lives in
this process: apps and cameras dropped from the config while the server was down stay
(storage brings them back), until a reload finds them declared and then dropped.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable

from apps.spec import SpecError, load_spec
from vigil.services.apps import AppService, parse_app
from vigil.services.errors import NotFound, ServiceError
from vigil.services.streams import StreamService, stream_options
from vigil.settings import Camera

log = logging.getLogger("vigil.cameras")


class CameraService:
    def __init__(self, streams: StreamService, apps: AppService) -> None:
        self.streams, self.apps = streams, apps
        self.declared: dict[str, set[str]] = {}  # camera -> the apps its declaration named
        self._lock = threading.Lock()  # one apply at a time (start-up, reload, SIGHUP)

    def apply(self, cameras: tuple[Camera, ...]) -> dict:
        """Make the server match `cameras`; returns what changed and each problem."""
        report: dict[str, Any] = {"added": [], "changed": [], "removed": [], "unchanged": [], "problems": []}
        with self._lock:
            wanted: dict[str, list[dict]] = {}
            for i, cam in enumerate(cameras):
                try:
                    wanted[cam.name] = [_app_data(cam, j, a) for j, a in enumerate(cam.apps)]
                except SpecError as exc:
                    report["problems"].append(f"cameras[{i}] ({cam.name}): {exc}")
            for name in sorted(set(self.declared) - {c.name for c in cameras}):
                self._remove_camera(name, report)
            for i, cam in enumerate(cameras):
                if cam.name in wanted:
                    where = f"cameras[{i}] ({cam.name})"
                    try:
                        self._apply_camera(cam, wanted[cam.name], report, where)
                    except ServiceError as exc:
                        report["problems"].append(f"{where}: {exc}")
        for problem in report["problems"]:
            log.error("config: %s", problem)
        return report

    def _apply_camera(self, cam: Camera, apps: list[dict], report: dict, where: str) -> None:
        """The camera's stream (ServiceError when it cannot be), then each app: one that
        cannot be is a problem of the report, and the others go on."""
        options = stream_options(cam.options).model_dump()
        if cam.name not in self.streams.names():
            self.streams.add(cam.name, cam.url, options)
            report["added"].append(f"stream {cam.name}")
        elif self.streams.stored(cam.name) != (cam.url, options):
            self._restart_stream(cam, options, {a.get("name") for a in apps})
            report["changed"].append(f"stream {cam.name}")
        else:
            report["unchanged"].append(f"stream {cam.name}")
        names = set()
        for j, data in enumerate(apps):
            name = data.get("name")
            names.add(name)
            try:
                self._apply_app(data, report)
            except ServiceError as exc:
                report["problems"].append(f"{where}: apps[{j}] ({name}): {exc}")
        names.discard(None)
        for name in sorted(self.declared.get(cam.name, set()) - names):
            self._delete_app(name, report)
        self.declared[cam.name] = names

    def _apply_app(self, data: dict, report: dict) -> None:
        name = data.get("name")
        if name not in self.apps.names():
            self.apps.add(data)  # the API's messages for a spec without a name, or a bad one
            report["added"].append(f"app {name}")
            return
        if self.apps.get(name)["spec"] == parse_app(data).model_dump(mode="json"):
            report["unchanged"].append(f"app {name}")
            return
        self.apps.delete(name)
        self.apps.add(data)
        report["changed"].append(f"app {name}")

    def _restart_stream(self, cam: Camera, options: dict, declared: set) -> None:
        """The stream again with its new url or options; the API's apps on it come back as
        they were (the declared ones are applied after)."""
        self.replace_stream(cam.name, cam.url, options, keep=lambda app: app not in declared)

    def replace_stream(self, name: str, url: str, options: dict, keep: Callable[[str], bool] = lambda _: True) -> dict:
        """Stream `name` started again from `url` with `options`, and the apps on it that
        `keep` names added again as they were (their tracks and counts start again). The
        new url and options are checked first: a bad one changes nothing."""
        self.streams.check(url, options)
        worker = self.streams.workers.get(name)
        if worker is None:
            raise NotFound(f"no stream {name!r}")
        apps = worker.app_names()
        specs = [self.apps.get(a)["spec"] for a in apps if keep(a)]
        for app in apps:
            self.apps.delete(app)
        self.streams.delete(name)
        self.streams.add(name, url, options)
        for spec in specs:
            self.apps.add(spec)
        return self.streams.get(name)

    def _remove_camera(self, name: str, report: dict) -> None:
        for app in sorted(self.declared.pop(name)):
            self._delete_app(app, report)
        try:
            self.streams.delete(name)
            report["removed"].append(f"stream {name}")
        except ServiceError as exc:  # apps added over the API still watch it
            report["problems"].append(f"camera {name} is no longer declared, but stays: {exc}")

    def _delete_app(self, name: str, report: dict) -> None:
        try:
            self.apps.delete(name)
            report["removed"].append(f"app {name}")
        except NotFound:
            pass


def _app_data(cam: Camera, index: int, ref: str | dict) -> dict:
    """An app of a camera as the API's POST body: a built-in's spec named CAMERA-REF, or
    the spec given, watching this camera."""
    if isinstance(ref, str):
        spec = load_spec(ref).model_dump(mode="json")
        return {**spec, "name": f"{cam.name}-{spec['name']}", "source": cam.name}
    if ref.get("source", cam.name) != cam.name:
        raise SpecError(f"apps[{index}]: source: an app of camera {cam.name!r} watches it; was {ref['source']!r}")
    return {**ref, "source": cam.name}
