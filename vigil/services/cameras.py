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
from typing import Any

from apps.spec import SpecError, load_spec, parse_spec
from vigil.services.apps import AppService
from vigil.services.errors import Invalid, NotFound, ServiceError
from vigil.services.streams import StreamService, stream_options
from vigil.settings import Camera
from vigil.storage import Storage

log = logging.getLogger("vigil.cameras")


class CameraService:
    def __init__(self, streams: StreamService, apps: AppService, storage: Storage) -> None:
        self.streams, self.apps, self.storage = streams, apps, storage
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
                    try:
                        self._apply_camera(cam, wanted[cam.name], report)
                    except ServiceError as exc:
                        report["problems"].append(f"cameras[{i}] ({cam.name}): {exc}")
        for problem in report["problems"]:
            log.error("config: %s", problem)
        return report

    def _apply_camera(self, cam: Camera, apps: list[dict], report: dict) -> None:
        options = stream_options(cam.options).model_dump()
        stored = {name: (url, opts) for name, url, opts in self.storage.streams()}
        if cam.name not in self.streams.names():
            self.streams.add(cam.name, cam.url, options)
            report["added"].append(f"stream {cam.name}")
        elif stored.get(cam.name) != (cam.url, options):
            self._restart_stream(cam, options, {a["name"] for a in apps})
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
                raise type(exc)(f"apps[{j}] ({name}): {exc}") from None
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
        try:
            spec = parse_spec(data).model_dump(mode="json")
        except SpecError as exc:
            raise Invalid(str(exc).replace("app spec: ", "", 1)) from None
        if self.apps.get(name)["spec"] == spec:
            report["unchanged"].append(f"app {name}")
            return
        self.apps.delete(name)
        self.apps.add(data)
        report["changed"].append(f"app {name}")

    def _restart_stream(self, cam: Camera, options: dict, declared: set) -> None:
        """The stream again with its new url or options; the API's apps on it come back as
        they were (the declared ones are applied after)."""
        worker = self.streams.workers.get(cam.name)
        others = [self.apps.get(a)["spec"] for a in (worker.app_names() if worker else []) if a not in declared]
        for name in worker.app_names() if worker else []:
            self.apps.delete(name)
        self.streams.delete(cam.name)
        self.streams.add(cam.name, cam.url, options)
        for spec in others:
            self.apps.add(spec)

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
