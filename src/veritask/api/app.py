"""``create_app(settings)``: the FastAPI application, its routes, errors, limits and OpenAPI."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib import metadata

from fastapi import APIRouter, FastAPI
from fastapi.openapi.utils import get_openapi

from veritask.api import authentication, health, limits, metrics, problems, schemas, text, v1
from veritask.api.settings import ApiSettings
from veritask.api.v2 import (
    alerts,
    backfills,
    callbacks,
    definitions,
    durations,
    explanations,
    pools,
    reruns,
    run_lists,
    runs,
    tokens,
)
from veritask.services.platform import Platform

TITLE = "Veritask"
DESCRIPTION = (
    "A task scheduler whose state you can trust. `/api/v2` shows the fine-grained states of "
    "docs/state-machine.md; `/api/v1` the four coarse values with `raw_state`. Errors are "
    "`application/problem+json` (RFC 9457). See docs/api.md."
)


def create_app(settings: ApiSettings, *, platform: Platform | None = None) -> FastAPI:
    """The API over the database of ``settings``, or over ``platform`` (which the caller keeps
    and closes: ``veritask up`` shares it with the scheduler)."""
    owned = platform or Platform.open(settings.database_url, settings.home)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        if platform is None:
            owned.close()

    app = FastAPI(
        title=TITLE,
        description=DESCRIPTION,
        version=_version(),
        docs_url="/docs",
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.platform = owned
    problems.install(app)
    app.include_router(health.router)
    app.include_router(metrics.router)
    v2 = APIRouter(prefix="/api/v2")
    modules = (
        definitions,
        run_lists,
        runs,
        reruns,
        callbacks,
        tokens,
        alerts,
        durations,
        explanations,
        backfills,
        pools,
    )
    for module in modules:
        v2.include_router(module.router)
    app.include_router(v2)
    app.include_router(v1.router)
    app.add_middleware(text.RefuseNul)
    app.add_middleware(limits.BodySizeLimit, max_bytes=settings.max_body_bytes)
    # Added last, so it runs first: no body is read for a caller who is not authenticated.
    guarded = [("/api/v2", module.router) for module in modules] + [("", v1.router)]
    app.add_middleware(authentication.AuthenticateFirst, routers=guarded)

    def openapi() -> dict[str, object]:
        if app.openapi_schema is None:
            app.openapi_schema = _document(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app


def _document(app: FastAPI) -> dict[str, object]:
    """The OpenAPI document, with errors under their real media type."""
    document = get_openapi(
        title=app.title, version=app.version, description=app.description, routes=app.routes
    )
    components = document.setdefault("components", {})
    found = components.setdefault("schemas", {})
    # Referenced by the apply route's hand-written request body.
    found["ApplyDefinition"] = schemas.ApplyDefinition.model_json_schema(
        ref_template="#/components/schemas/{model}"
    )
    for path in document.get("paths", {}).values():
        for operation in path.values():
            for code, response in operation.get("responses", {}).items():
                content = response.get("content", {})
                if code.isdigit() and int(code) >= 400 and "application/json" in content:
                    if code == "503" and "Readiness" in str(content):
                        continue
                    content[problems.MEDIA_TYPE] = content.pop("application/json")
    return document


def _version() -> str:
    try:
        return metadata.version("veritask")
    except metadata.PackageNotFoundError:
        return "0"
